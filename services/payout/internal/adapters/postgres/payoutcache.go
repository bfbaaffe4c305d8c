package postgres

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// PayoutChangedChannel is the channel migration 0007's triggers notify with
// a payout's id after every change to what GET /v1/payouts/{id} answers.
const PayoutChangedChannel = "payout_changed"

// Cache limits.
const (
	payoutCacheMaxDefault = 16384
	cacheRelistenFirst    = 100 * time.Millisecond
	cacheRelistenMax      = 5 * time.Second
)

// PayoutCache keeps the payouts providers poll, so a poll (DESIGN §7:
// ETag, 304) costs no database round trip. It is right only while it
// listens: Run holds a connection of its own on LISTEN payout_changed and
// drops a payout's copy when its notification arrives (any process's
// write, after its commit). Until Run listens, and whenever its connection
// is lost, the cache is emptied and keeps nothing: every poll reads the
// database. A copy read before an invalidation that arrived meanwhile is
// not kept (epoch), so a read racing a write cannot leave a stale copy.
type PayoutCache struct {
	Pool *pgxpool.Pool
	Log  *slog.Logger
	Max  int // entries; payoutCacheMaxDefault when 0

	mu    sync.RWMutex
	m     map[string]domain.Payout
	epoch uint64 // bumped by every invalidation
	live  bool   // listening: copies may be kept
}

// Get returns the cached payout, if any.
func (c *PayoutCache) Get(id string) (domain.Payout, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	p, ok := c.m[id]
	return p, ok
}

// Epoch is the invalidation count before a read; Put keeps the read only
// if it is still current. ok is false while the cache is not listening.
func (c *PayoutCache) Epoch() (epoch uint64, ok bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.epoch, c.live
}

// Put keeps p, read after Epoch answered epoch, unless an invalidation
// arrived since (or the cache stopped listening).
func (c *PayoutCache) Put(epoch uint64, p domain.Payout) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.live || c.epoch != epoch {
		return
	}
	if c.m == nil {
		c.m = map[string]domain.Payout{}
	}
	max := c.Max
	if max <= 0 {
		max = payoutCacheMaxDefault
	}
	if len(c.m) >= max { // drop about a tenth, at random (map order)
		n := max/10 + 1
		for k := range c.m {
			delete(c.m, k)
			if n--; n == 0 {
				break
			}
		}
	}
	c.m[p.ID] = p
}

// Forget drops one payout's copy.
func (c *PayoutCache) Forget(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	delete(c.m, id)
}

// reset drops every copy; live says whether copies may be kept from now.
func (c *PayoutCache) reset(live bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	c.m = nil
	c.live = live
}

// Len is the number of payouts cached (tests).
func (c *PayoutCache) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}

// Run listens for payout changes until ctx ends, reconnecting with backoff;
// the cache keeps copies only while it listens.
func (c *PayoutCache) Run(ctx context.Context) error {
	defer c.reset(false)
	wait := cacheRelistenFirst
	for ctx.Err() == nil {
		err := c.listen(ctx)
		c.reset(false)
		if ctx.Err() != nil {
			return nil
		}
		c.Log.Warn("payout cache: listener lost; polls read the database until it is back", "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(wait*2, cacheRelistenMax)
	}
	return nil
}

// listen holds one connection on LISTEN and applies notifications.
func (c *PayoutCache) listen(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, c.Pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "listen "+PayoutChangedChannel); err != nil {
		return err
	}
	// Changes committed before LISTEN took effect were never notified:
	// start empty, from a new epoch.
	c.reset(true)
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		c.Forget(n.Payload)
	}
}
