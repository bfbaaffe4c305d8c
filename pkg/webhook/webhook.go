// Package webhook is gpubill's one outbound webhook scheme, used by payout's
// provider webhooks and the ledger's lease control webhooks, and checked by
// the simulated marketplace: a JSON POST carrying
//
//	Gpubill-Timestamp: unix seconds
//	Gpubill-Signature: "v1=" + hex(HMAC-SHA256(secret, timestamp + "." + body))
//	Gpubill-Event-Id:  the event's id (a receiver applies each id once)
//
// While a secret is being rotated the delivery carries one signature per
// secret, comma-separated, the new one first ("v1=<new>,v1=<previous>"); a
// receiver accepts the delivery if one of them is its secret's (Verify).
// A receiver recomputes the signature and refuses a stale timestamp (replay).
package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	neturl "net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gpubill/gpubill/pkg/apperr"
)

// The headers of a delivery.
const (
	HeaderTimestamp = "Gpubill-Timestamp"
	HeaderSignature = "Gpubill-Signature"
	HeaderEventID   = "Gpubill-Event-Id"
)

// Sign is the signature of body sent at ts.
func Sign(secret []byte, ts int64, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(strconv.AppendInt(nil, ts, 10)) // a hash.Hash's Write never fails
	m.Write([]byte{'.'})
	m.Write(body)
	return "v1=" + hex.EncodeToString(m.Sum(nil))
}

// Verify reports whether sig — one signature, or several comma-separated
// during a rotation — holds body's signature at ts with secret, comparing
// in constant time.
func Verify(secret []byte, ts int64, body []byte, sig string) bool {
	want := []byte(Sign(secret, ts, body))
	ok := false
	for _, s := range strings.Split(sig, ",") {
		if hmac.Equal(want, []byte(strings.TrimSpace(s))) {
			ok = true
		}
	}
	return ok
}

// SignAll is the Gpubill-Signature of body sent at ts with every secret,
// in order.
func SignAll(secrets [][]byte, ts int64, body []byte) string {
	sigs := make([]string, len(secrets))
	for i, s := range secrets {
		sigs[i] = Sign(s, ts, body)
	}
	return strings.Join(sigs, ",")
}

// Post sends one signed delivery and waits at most timeout. It answers the
// receiver's status code; anything but a 2xx is an error.
func Post(ctx context.Context, client *http.Client, url string, secret []byte, ts int64, eventID string, body []byte, timeout time.Duration) (int, error) {
	return PostSigned(ctx, client, url, [][]byte{secret}, ts, eventID, body, timeout)
}

// PostSigned is Post signing with each of secrets (a rotation: the new
// secret first, then the previous one).
func PostSigned(ctx context.Context, client *http.Client, url string, secrets [][]byte, ts int64, eventID string, body []byte, timeout time.Duration) (int, error) {
	if len(secrets) == 0 {
		return 0, fmt.Errorf("webhook to %s: no secret to sign with", apperr.RedactURL(url))
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, redacted(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(HeaderSignature, SignAll(secrets, ts, body))
	req.Header.Set(HeaderEventID, eventID)
	resp, err := client.Do(req)
	if err != nil {
		return 0, redacted(err)
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, fmt.Errorf("receiver answered %d", resp.StatusCode)
	}
	return resp.StatusCode, nil
}

// redacted is err with the URL it quotes passed through apperr.RedactURL.
// The HTTP client's error (*url.Error) masks a password but quotes the
// path and the query whole, and a webhook's URL is often its credential (a
// chat bot's /hook/<token>, ?access_token=): the error is logged and
// stored in the delivery's row. The operation and the cause are kept.
func redacted(err error) error {
	var ue *neturl.Error
	if !errors.As(err, &ue) {
		return err
	}
	return &neturl.Error{Op: ue.Op, URL: apperr.RedactURL(ue.URL), Err: ue.Err}
}

// Backoff is the wait before attempt (1-based): first, doubled per attempt,
// at most max.
func Backoff(first, max time.Duration, attempt int) time.Duration {
	b := first
	for range attempt - 1 {
		b *= 2
		if b >= max {
			return max
		}
	}
	return b
}
