// Package cursor is the one page token of every gpubill listing: an opaque,
// versioned position (the sort key of the last row served) that a listing
// encodes into next_page_token and decodes from page_token.
//
// A token is base64url(version, the listing's values, a check). The check
// is a truncated SHA-256 over the listing's name, the version and the
// values, so a token altered or cut short, or one issued by another listing,
// is refused with a 400 on page_token rather than read as some other
// position. A listing names its filters in the listing name (Scoped), so a
// token used with other filters is refused too: its position, read under
// them, would skip or repeat rows, or end the listing early. It is not a secret signature (the key is this code): a listing
// still validates every value it decodes, and a token reveals nothing a
// caller could not list.
package cursor

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gpubill/gpubill/pkg/apperr"
)

// version is the token layout below; a layout change bumps it, and tokens of
// the old layout are refused (a client starts its listing again).
const version = 1

// Limits of a token: a page position is a few short keys and at most one
// Postgres snapshot (ValueBytesMax: a listing packs one to fit).
const (
	valuesMax     = 8
	ValueBytesMax = 1024
	checkBytes    = 8
	tokenBytesMax = 2048
)

// Field is the request field a bad token is reported on.
const Field = "page_token"

// Position is the decoded values of a token, in the order they were encoded.
type Position struct {
	vals []string
}

// Scoped names listing under its filters (in order; "" for one not set): a
// token encoded for one scope is refused by Decode under any other. With no
// filter set it is the listing itself, so the tokens of an unfiltered
// listing are those versions before scopes made (a client paging through
// an upgrade goes on).
func Scoped(listing string, filters ...string) string {
	if !slices.ContainsFunc(filters, func(f string) bool { return f != "" }) {
		return listing
	}
	b := []byte(listing)
	for _, f := range filters {
		b = append(b, 0)
		b = binary.AppendUvarint(b, uint64(len(f)))
		b = append(b, f...)
	}
	return string(b)
}

// Encode returns the token of the position vals in listing.
func Encode(listing string, vals ...string) string {
	b := []byte{version}
	for _, v := range vals {
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	b = append(b, check(listing, b)...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Decode reads a token Encode made for listing with n values. Anything else
// is an apperr.Invalid on page_token (a 400).
func Decode(listing, token string, n int) (Position, error) {
	bad := func(why string) (Position, error) {
		return Position{}, apperr.Invalid(Field, "not a page token of this listing (%s); start the listing again without one", why)
	}
	if len(token) > tokenBytesMax {
		return bad("too long")
	}
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(b) < 1+checkBytes {
		return bad("malformed")
	}
	body, sum := b[:len(b)-checkBytes], b[len(b)-checkBytes:]
	if subtle.ConstantTimeCompare(sum, check(listing, body)) != 1 {
		return bad("altered, or issued by another listing or for other filters")
	}
	if body[0] != version {
		return bad(fmt.Sprintf("version %d, this server reads version %d", body[0], version))
	}
	var p Position
	for rest := body[1:]; len(rest) > 0; {
		l, k := binary.Uvarint(rest)
		if k <= 0 || l > ValueBytesMax || uint64(len(rest)-k) < l || len(p.vals) == valuesMax {
			return bad("malformed")
		}
		v := string(rest[k : k+int(l)])
		// Every value a listing encodes is text from Postgres: valid UTF-8,
		// no NUL. The check is not secret (the key is this code), so a
		// token forged with such bytes reached a listing's SQL, a 500.
		if !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0 {
			return bad("malformed")
		}
		p.vals = append(p.vals, v)
		rest = rest[k+int(l):]
	}
	if len(p.vals) != n {
		return bad("malformed")
	}
	return p, nil
}

func check(listing string, body []byte) []byte {
	h := sha256.New()
	h.Write([]byte("gpubill page token\x00"))
	h.Write([]byte(listing))
	h.Write([]byte{0})
	h.Write(body)
	return h.Sum(nil)[:checkBytes]
}

// Malformed is the refusal of a token whose values a listing cannot use (a
// listing that checks a value further than Position does).
func Malformed() error {
	return apperr.Invalid(Field, "not a page token of this listing (malformed); start the listing again without one")
}

// String is value i.
func (p Position) String(i int) string { return p.vals[i] }

// Time is value i as an instant encoded with FormatTime.
func (p Position) Time(i int) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, p.vals[i])
	if err != nil {
		return time.Time{}, Malformed()
	}
	return t.UTC(), nil
}

// Int64 is value i as an integer encoded with FormatInt64.
func (p Position) Int64(i int) (int64, error) {
	n, err := strconv.ParseInt(p.vals[i], 10, 64)
	if err != nil {
		return 0, Malformed()
	}
	return n, nil
}

// FormatTime is the encoding of an instant that Position.Time reads back
// (nanoseconds kept, UTC).
func FormatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// FormatInt64 is the encoding of an integer that Position.Int64 reads back.
func FormatInt64(n int64) string { return strconv.FormatInt(n, 10) }
