package ids

import (
	"errors"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestCheckPartyID(t *testing.T) {
	tests := []struct {
		give string
		want bool
	}{
		{"p-001", true},
		{"r_42", true},
		{"A", true},
		{"0abc", true},
		{"p-", true},
		{"p\x7f", false},
		{"p\xff", false},
		{strings.Repeat("a", PartyIDLenMax), true},
		{strings.Repeat("a", PartyIDLenMax+1), false},
		{"", false},
		{"p:1", false},
		{"p@x", false},
		{"é", false},
		{"p.1", false},
		{"p*", false},
		{"p>", false},
		{"p 1", false},
		{"p/1", false},
		{"-p", false},
		{"_p", false},
		{"p\x00", false},
		{"p\n", false},
	}
	for _, tt := range tests {
		err := CheckPartyID(tt.give)
		if got := err == nil; got != tt.want {
			t.Errorf("CheckPartyID(%q) = %v, want ok %v", tt.give, err, tt.want)
		}
		if err != nil && !errors.Is(err, ErrGrammar) {
			t.Errorf("CheckPartyID(%q) error %v does not wrap ErrGrammar", tt.give, err)
		}
	}
}

func TestCheckJurisdiction(t *testing.T) {
	tests := []struct {
		give string
		want bool
	}{
		{"CN", true},
		{"US", true},
		{"CN-BJ", true},
		{"US_CA", true},
		{strings.Repeat("A", JurisdictionLenMax), true},
		{strings.Repeat("A", JurisdictionLenMax+1), false},
		{"", false},
		{"CN Beijing", false},
		{"CN:BJ", false},
		{"CN.BJ", false},
		{"中国", false},
		{"-CN", false},
	}
	for _, tt := range tests {
		if got := CheckJurisdiction(tt.give) == nil; got != tt.want {
			t.Errorf("CheckJurisdiction(%q) ok = %v, want %v", tt.give, got, tt.want)
		}
	}
}

func TestCheckCycleID(t *testing.T) {
	tests := []struct {
		give string
		want bool
	}{
		{"cyc-20261112", true},
		{"cyc-20261312", false},
		{"cyc-2026111", false},
		{"cy-202611120", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := CheckCycleID(tt.give) == nil; got != tt.want {
			t.Errorf("CheckCycleID(%q) ok = %v, want %v", tt.give, got, tt.want)
		}
	}
}

func TestParseAddress(t *testing.T) {
	tests := []struct {
		give string
		want Address
		ok   bool
	}{
		{"bank:client", Address{Class: ClassBank, Sub: "client"}, true},
		{"bank:operating", Address{Class: ClassBank, Sub: "operating"}, true},
		{"bank:other", Address{}, false},
		{"renter:r-1:wallet", Address{Class: ClassRenter, Party: "r-1"}, true},
		{"renter:r@1:wallet", Address{}, false},
		{"renter:r-1", Address{}, false},
		{"provider:p-1:pending:cyc-20261112", Address{Class: ClassProvider, Party: "p-1", Sub: SubPending, Cycle: "cyc-20261112"}, true},
		{"provider:p-1:pending:cyc-2026", Address{}, false},
		{"provider:p-1:available", Address{Class: ClassProvider, Party: "p-1", Sub: SubAvailable}, true},
		{"provider:p-1:in_transit", Address{Class: ClassProvider, Party: "p-1", Sub: SubInTransit}, true},
		{"provider:p-1:available:x", Address{}, false},
		{"provider:p.1:available", Address{}, false},
		{"provider:é:available", Address{}, false},
		{"provider:p-1:held", Address{}, false},
		{"tax:withheld:CN", Address{Class: ClassTax, Party: "CN"}, true},
		{"tax:withheld:CN Beijing", Address{}, false},
		{"tax:paid:CN", Address{}, false},
		{"platform:revenue:commission", Address{Class: ClassPlatform}, true},
		{"platform:revenue", Address{}, false},
		{"world", Address{}, false},
		{"", Address{}, false},
	}
	for _, tt := range tests {
		got, err := ParseAddress(tt.give)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseAddress(%q) = %+v, %v; want %+v, ok %v", tt.give, got, err, tt.want, tt.ok)
		}
	}
}

func TestIsSubjectToken(t *testing.T) {
	tests := []struct {
		give string
		want bool
	}{
		{"p-001", true},
		{"cyc-20261112", true},
		{"", false},
		{"a.b", false},
		{"a*", false},
		{">", false},
		{"a b", false},
		{"a\tb", false},
		{"é", false},
	}
	for _, tt := range tests {
		if got := IsSubjectToken(tt.give); got != tt.want {
			t.Errorf("IsSubjectToken(%q) = %v, want %v", tt.give, got, tt.want)
		}
	}
}

// Every id the door accepts makes valid addresses of every kind and a valid
// subject token, and ParseAddress gives the id back; every id it refuses makes
// no valid address. Strings are drawn from an alphabet weighted towards the
// characters that matter (':', '.', '@', space, non-ASCII).
func TestPropertyAcceptedIDMakesValidAddresses(t *testing.T) {
	alphabet := []rune("aZ09_-:.@*> /é中\x00")
	rapid.Check(t, func(t *rapid.T) {
		id := rapid.StringOf(rapid.SampledFrom(alphabet)).Draw(t, "id")
		if rapid.Bool().Draw(t, "plain") {
			id = rapid.StringMatching(`[A-Za-z0-9][A-Za-z0-9_-]{0,70}`).Draw(t, "plain_id")
		}
		cycle := "cyc-20261112"
		addrs := []string{RenterWallet(id), ProviderPending(id, cycle), ProviderAvailable(id), ProviderInTransit(id)}
		if CheckPartyID(id) != nil {
			for _, a := range addrs {
				if _, err := ParseAddress(a); err == nil {
					t.Fatalf("id %q is refused at the door but address %q parses", id, a)
				}
			}
			return
		}
		if !IsSubjectToken(id) {
			t.Fatalf("id %q is accepted but is not a subject token", id)
		}
		for _, a := range addrs {
			got, err := ParseAddress(a)
			if err != nil {
				t.Fatalf("id %q is accepted but address %q is refused: %v", id, a, err)
			}
			if got.Party != id {
				t.Fatalf("ParseAddress(%q).Party = %q, want %q", a, got.Party, id)
			}
		}
	})
}

// Likewise for jurisdictions and tax:withheld:{jurisdiction}.
func TestPropertyAcceptedJurisdictionMakesValidAddress(t *testing.T) {
	alphabet := []rune("CNus09_- :.é")
	rapid.Check(t, func(t *rapid.T) {
		j := rapid.StringOf(rapid.SampledFrom(alphabet)).Draw(t, "jurisdiction")
		_, err := ParseAddress(TaxWithheld(j))
		if accepted := CheckJurisdiction(j) == nil; accepted != (err == nil) {
			t.Fatalf("jurisdiction %q: door accepts %v, address parse error %v", j, accepted, err)
		}
	})
}
