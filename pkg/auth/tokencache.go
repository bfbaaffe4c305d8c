package auth

import (
	"sync"
	"time"
)

// tokenCacheMaxDefault bounds a TokenCache (a token is a few hundred bytes).
const tokenCacheMaxDefault = 8192

// TokenCache remembers the tokens one Guard (one secret) verified, until
// each expires: the HMAC and the claims' JSON are checked once per token,
// not once per call. Only accepted tokens are kept, under their exact
// text; a hit is re-checked against its expiry. Safe for concurrent use;
// the zero value is ready. A nil *TokenCache remembers nothing.
type TokenCache struct {
	Max int // entries; tokenCacheMaxDefault when 0
	Now func() time.Time

	mu sync.RWMutex
	m  map[string]cachedToken
}

type cachedToken struct {
	p   Principal
	exp time.Time
}

func (c *TokenCache) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *TokenCache) get(tok string) (Principal, bool) {
	if c == nil {
		return Principal{}, false
	}
	c.mu.RLock()
	e, ok := c.m[tok]
	c.mu.RUnlock()
	if !ok || !c.now().Before(e.exp) {
		return Principal{}, false
	}
	return e.p, true
}

func (c *TokenCache) put(tok string, p Principal, exp time.Time) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]cachedToken{}
	}
	max := c.Max
	if max <= 0 {
		max = tokenCacheMaxDefault
	}
	if len(c.m) >= max { // drop the expired, else about a tenth at random
		now := c.now()
		for k, e := range c.m {
			if !now.Before(e.exp) {
				delete(c.m, k)
			}
		}
		for k := range c.m {
			if len(c.m) < max-max/10 {
				break
			}
			delete(c.m, k)
		}
	}
	c.m[tok] = cachedToken{p: p, exp: exp}
}
