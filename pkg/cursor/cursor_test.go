package cursor_test

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/cursor"
)

func TestRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 30, 23, 59, 59, 123456789, time.FixedZone("CST", 8*3600))
	tok := cursor.Encode("usage", cursor.FormatTime(at), "ev|with|pipes", cursor.FormatInt64(-42), "")
	p, err := cursor.Decode("usage", tok, 4)
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.Time(0)
	if err != nil || !got.Equal(at) || got.Location() != time.UTC {
		t.Errorf("Time = %v, %v; want %v in UTC", got, err, at)
	}
	if p.String(1) != "ev|with|pipes" || p.String(3) != "" {
		t.Errorf("String = %q, %q", p.String(1), p.String(3))
	}
	if n, err := p.Int64(2); err != nil || n != -42 {
		t.Errorf("Int64 = %d, %v", n, err)
	}
}

// Every refusal is a 400 on page_token, never a 500 and never a position.
func TestRefusesWithA400(t *testing.T) {
	good := cursor.Encode("statements", "cyc-20261130", "CNY")
	raw, err := base64.RawURLEncoding.DecodeString(good)
	if err != nil {
		t.Fatal(err)
	}
	flip := func(i int) string {
		b := append([]byte(nil), raw...)
		b[i] ^= 0x01
		return base64.RawURLEncoding.EncodeToString(b)
	}
	tests := []struct {
		name    string
		listing string
		give    string
		n       int
	}{
		{"plain base64 of an old token", "statements", base64.RawURLEncoding.EncodeToString([]byte("cyc-20261130")), 2},
		{"not base64", "statements", "%%%", 2},
		{"empty after decoding", "statements", "", 2},
		{"a value byte altered", "statements", flip(3), 2},
		{"the version altered", "statements", flip(0), 2},
		{"the check altered", "statements", flip(len(raw) - 1), 2},
		{"cut short", "statements", good[:len(good)-3], 2},
		{"another listing's token", "withholdings", good, 2},
		{"wrong number of values", "statements", good, 3},
		{"too long", "statements", strings.Repeat("A", 4096), 2},
		// Forged with a valid check (it is not secret): values no listing
		// encodes, which reached the listings' SQL as a 500.
		{"a value holding a NUL", "statements", cursor.Encode("statements", "a\x00b", "CNY"), 2},
		{"a value not UTF-8", "statements", cursor.Encode("statements", "cyc-\xc0", "CNY"), 2},
	}
	for _, tt := range tests {
		_, err := cursor.Decode(tt.listing, tt.give, tt.n)
		var inv *apperr.InvalidError
		if !errors.As(err, &inv) || inv.Violations[0].Field != "page_token" {
			t.Errorf("%s: err = %v, want an InvalidError on page_token", tt.name, err)
			continue
		}
		if c := status.Code(apperr.ToStatus(err)); c != codes.InvalidArgument {
			t.Errorf("%s: code %v, want InvalidArgument", tt.name, c)
		}
	}
}

func TestTypedValuesRefuseOtherText(t *testing.T) {
	p, err := cursor.Decode("x", cursor.Encode("x", "not-a-time", "12a"), 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Time(0); err == nil {
		t.Error("Time accepted not-a-time")
	}
	if _, err := p.Int64(1); err == nil {
		t.Error("Int64 accepted 12a")
	}
}

// A token is bound to the filters it was made under: read under others it
// would start them at a position of another listing (a token of
// ?prefix=renter: used with ?prefix=provider: ended that listing at once).
func TestScopedTokensRefuseOtherFilters(t *testing.T) {
	tok := cursor.Encode(cursor.Scoped("accounts", "renter:", ""), "renter:r-002")
	if _, err := cursor.Decode(cursor.Scoped("accounts", "renter:", ""), tok, 1); err != nil {
		t.Fatalf("same filters: %v", err)
	}
	for _, other := range []string{cursor.Scoped("accounts", "provider:", ""), cursor.Scoped("accounts", "renter:"),
		cursor.Scoped("accounts", "renter", ":"), cursor.Scoped("accounts", "", "renter:"), "accounts"} {
		_, err := cursor.Decode(other, tok, 1)
		var inv *apperr.InvalidError
		if !errors.As(err, &inv) || inv.Violations[0].Field != "page_token" {
			t.Errorf("under scope %q: err = %v, want an InvalidError on page_token", other, err)
		}
	}
}

// An unfiltered listing's scope is the listing itself: its tokens are those
// of the version before scopes, which a client paging through an upgrade
// still holds.
func TestScopedWithoutFiltersIsTheListing(t *testing.T) {
	old := cursor.Encode("payout.payouts", "po_1")
	if _, err := cursor.Decode(cursor.Scoped("payout.payouts", "", "", ""), old, 1); err != nil {
		t.Fatalf("a token of the version before, no filter set: %v", err)
	}
	if _, err := cursor.Decode(cursor.Scoped("payout.payouts", "p-1", "", ""), old, 1); err == nil {
		t.Fatal("an unfiltered token under a filter: want refused")
	}
}
