package apperr

import (
	"net/url"
	"strings"
)

// urlMask stands for a part of a URL an error does not show (as
// url.URL.Redacted masks a password).
const urlMask = "xxxxx"

// RedactURL is what an error may quote of a configured URL: its scheme,
// host and port, with every part that may carry a credential masked: the
// userinfo (a password, and the user too, which is how a token rides in
// nats://TOKEN@host or https://TOKEN:x-oauth-basic@host), the path (a
// webhook's secret is often its last segment), the query (?token=…) and
// the fragment. An opaque URL (user:pass@host, parsed as scheme "user")
// or a value that does not parse is not shown at all: url's own error
// quotes it whole. A start-up error reaches logs and crash reports that
// more people read than hold the secrets; what it must say (the scheme or
// the host is wrong) survives.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Opaque != "" {
		return "(unparsable URL, not shown)"
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(urlMask, urlMask)
		} else {
			u.User = url.User(urlMask)
		}
	}
	if u.Path != "" && u.Path != "/" {
		u.Path, u.RawPath = "/"+urlMask, ""
	}
	if u.RawQuery != "" {
		u.RawQuery = urlMask
	}
	if u.Fragment != "" {
		u.Fragment, u.RawFragment = urlMask, ""
	}
	return u.String()
}

// RedactURLs is RedactURL of each of a comma-separated list (a NATS
// cluster's servers).
func RedactURLs(raw string) string {
	parts := strings.Split(raw, ",")
	for i, p := range parts {
		parts[i] = RedactURL(strings.TrimSpace(p))
	}
	return strings.Join(parts, ",")
}
