package domain

import (
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"pgregory.net/rapid"
)

func wallet(balance, limit, burn string) Wallet {
	return Wallet{RenterID: "r-1", Currency: "CNY", Balance: decimal.RequireFromString(balance),
		CreditLimit: decimal.RequireFromString(limit), BurnPerHour: decimal.RequireFromString(burn)}
}

func TestRunway(t *testing.T) {
	for _, tt := range []struct {
		give Wallet
		want string // "" = nothing burns
	}{
		{wallet("100", "0", "40"), "2.50"},
		{wallet("10", "50", "40"), "1.50"},    // (10 + 50) / 40
		{wallet("-20", "50", "40"), "0.75"},   // still 30 to spend
		{wallet("-60", "50", "40"), "0.00"},   // past the limit
		{wallet("100", "0", "0"), ""},         // nothing burns
		{wallet("100", "0", "30"), "3.33"},    // truncated, never rounded up
		{wallet("0.01", "0", "3600"), "0.00"}, // 10 ms left
	} {
		if got := tt.give.RunwayString(); got != tt.want {
			t.Errorf("runway of %+v = %q, want %q", tt.give, got, tt.want)
		}
	}
}

// TestNextLease walks one wallet through warned, stopped, resumed: each
// crossing is announced once, a repeat evaluation announces nothing.
func TestNextLease(t *testing.T) {
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	warn := 2 * time.Hour
	type step struct {
		give      Wallet
		wantState LeaseState
		wantKinds string
	}
	steps := []step{
		{wallet("100", "0", "10"), LeaseOK, ""},                             // 10 h
		{wallet("15", "0", "10"), LeaseWarned, "runway_low"},                // 1.5 h
		{wallet("12", "0", "10"), LeaseWarned, ""},                          // still warned: once
		{wallet("0", "0", "10"), LeaseStopped, "stop_requested"},            // reached the limit
		{wallet("-5", "0", "10"), LeaseStopped, ""},                         // below: flagged, no second stop
		{wallet("5", "0", "10"), LeaseWarned, "resume_allowed runway_low"},  // a small top-up: resumed, warned
		{wallet("500", "0", "10"), LeaseOK, ""},                             // a big one: runway back
		{wallet("-1", "0", "10"), LeaseStopped, "stop_requested"},           // a second crossing
		{wallet("-1", "5", "10"), LeaseWarned, "resume_allowed runway_low"}, // the limit raised covers it
	}
	var l Lease
	var ids []string
	for i, s := range steps {
		var evs []LeaseEvent
		l, evs = NextLease(l, s.give, warn, now.Add(time.Duration(i)*time.Minute))
		kinds := ""
		for j, e := range evs {
			if j > 0 {
				kinds += " "
			}
			kinds += string(e.Kind)
			ids = append(ids, e.ID())
		}
		if l.State != s.wantState || kinds != s.wantKinds {
			t.Errorf("step %d (%+v): state %s events %q, want %s %q", i, s.give, l.State, kinds, s.wantState, s.wantKinds)
		}
		if over := s.give.OverLimit(); over != !l.OverLimitSince.IsZero() {
			t.Errorf("step %d: over limit %v but since %v", i, over, l.OverLimitSince)
		}
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Errorf("event id %s announced twice", id)
		}
		seen[id] = true
	}
	if l.Crossing != 2 || l.Warnings != 3 {
		t.Errorf("crossings %d warnings %d, want 2 and 3", l.Crossing, l.Warnings)
	}
}

// Where BurnMatters says no, NextLease announces nothing and moves the
// record the same whatever the burn rate: lease control may leave it unread.
func TestBurnMattersOnlyWhereNextLeaseUsesIt(t *testing.T) {
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	rapid.Check(t, func(rt *rapid.T) {
		amount := func(label string) decimal.Decimal {
			return decimal.New(rapid.Int64Range(-5000, 5000).Draw(rt, label), -2)
		}
		prev := Lease{State: rapid.SampledFrom([]LeaseState{"", LeaseOK, LeaseWarned, LeaseStopped}).Draw(rt, "state"),
			Crossing: rapid.Int64Range(0, 3).Draw(rt, "crossing"), Warnings: rapid.Int64Range(0, 3).Draw(rt, "warnings")}
		if rapid.Bool().Draw(rt, "over_before") {
			prev.OverLimitSince = now.Add(-time.Hour)
		}
		w := Wallet{RenterID: "r-1", Currency: "CNY", Balance: amount("balance"), CreditLimit: amount("limit").Abs(),
			BurnPerHour: amount("burn").Abs(), Closed: rapid.Bool().Draw(rt, "closed")}
		if BurnMatters(prev, w) {
			return
		}
		unread := w
		unread.BurnPerHour = decimal.Zero
		l1, e1 := NextLease(prev, w, 2*time.Hour, now)
		l2, e2 := NextLease(prev, unread, 2*time.Hour, now)
		if l1 != l2 || len(e1) > 0 || len(e2) > 0 {
			rt.Fatalf("burn %s: %+v %v; unread: %+v %v", w.BurnPerHour, l1, e1, l2, e2)
		}
	})
}

// A wallet in a currency the renter is not billed in never stops or warns
// it, and one stopped before (by code that read it as the renter's) is
// resumed once.
func TestNextLeaseForeignWallet(t *testing.T) {
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	w := wallet("0", "0", "10")
	w.Foreign = true
	if l, evs := NextLease(Lease{}, w, 2*time.Hour, now); l.State != LeaseOK || len(evs) != 0 {
		t.Fatalf("a foreign wallet at 0: %s %v, want ok and nothing announced", l.State, evs)
	}
	l, evs := NextLease(Lease{State: LeaseStopped, Crossing: 1}, w, 2*time.Hour, now)
	if l.State != LeaseOK || len(evs) != 1 || evs[0].Kind != EventResumeAllowed {
		t.Fatalf("a foreign wallet stopped before: %s %v, want ok and one resume", l.State, evs)
	}
	if l, evs = NextLease(l, w, 2*time.Hour, now); l.State != LeaseOK || len(evs) != 0 {
		t.Fatalf("again: %s %v, want nothing more", l.State, evs)
	}
}

// A closed renter's wallet is stopped whatever its balance, once, and never
// resumed: not by money, not as a wallet in another currency.
func TestNextLeaseClosedRenter(t *testing.T) {
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	closed := func(balance, limit string, foreign bool) Wallet {
		w := wallet(balance, limit, "10")
		w.Closed, w.Foreign = true, foreign
		return w
	}
	tests := []struct {
		name      string
		give      Lease
		wallet    Wallet
		wantState LeaseState
		wantKinds string
	}{
		{"ok with 700 to spend", Lease{State: LeaseOK}, closed("200", "500", false), LeaseStopped, "stop_requested"},
		{"never evaluated", Lease{}, closed("0", "500", false), LeaseStopped, "stop_requested"},
		{"warned", Lease{State: LeaseWarned, Warnings: 1}, closed("5", "0", false), LeaseStopped, "stop_requested"},
		{"stopped, topped up", Lease{State: LeaseStopped, Crossing: 1}, closed("900", "500", false), LeaseStopped, ""},
		{"stopped, foreign", Lease{State: LeaseStopped, Crossing: 1}, closed("900", "0", true), LeaseStopped, ""},
		{"ok, foreign", Lease{State: LeaseOK}, closed("900", "0", true), LeaseStopped, "stop_requested"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, evs := NextLease(tt.give, tt.wallet, 2*time.Hour, now)
			kinds := ""
			for _, e := range evs {
				kinds += string(e.Kind)
			}
			if l.State != tt.wantState || kinds != tt.wantKinds {
				t.Fatalf("state %s events %q, want %s %q", l.State, kinds, tt.wantState, tt.wantKinds)
			}
		})
	}
}
