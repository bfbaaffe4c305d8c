package app

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// arrivalStore is gateStore recording the arrival dates set without a move.
type arrivalStore struct {
	gateStore
	notes []string
}

func (s *arrivalStore) Update(_ context.Context, fn func(Tx) error) error { return fn(s) }
func (s *arrivalStore) SetArrival(_ context.Context, p *domain.Payout, note string, _ time.Time) error {
	s.p, s.reason = *p, note
	s.notes = append(s.notes, note)
	return nil
}

// The rail's arrival date moves after submission (the bank-file rail's
// batch executes later than guessed: a late cut, an oversize batch, a
// restore hold, a holiday added): each answer of the rail carrying a date
// is taken, while submitted and while in transit, and a change is kept in
// the payout's history. Only entering submitted took one: the provider was
// told the first guess for good.
func TestFollowTakesTheRailsNewArrivalDate(t *testing.T) {
	day := func(s string) time.Time {
		d, err := time.Parse(time.DateOnly, s)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	tests := []struct {
		name       string
		give       string // the payout's status
		railState  string
		railDate   string // "" answers none
		wantStatus string
		wantDate   string
		wantNote   bool // the change named in the history
	}{
		{"submitted, the rail accepted", domain.StatusSubmitted, RailAccepted, "2026-12-03", domain.StatusSubmitted, "2026-12-03", true},
		{"in transit", domain.StatusInTransit, RailInTransit, "2026-12-03", domain.StatusInTransit, "2026-12-03", true},
		{"submitted, now in transit", domain.StatusSubmitted, RailInTransit, "2026-12-03", domain.StatusInTransit, "2026-12-03", true},
		{"an earlier date", domain.StatusInTransit, RailInTransit, "2026-11-30", domain.StatusInTransit, "2026-11-30", true},
		{"the same date", domain.StatusSubmitted, RailAccepted, "2026-12-01", domain.StatusSubmitted, "2026-12-01", false},
		{"no date", domain.StatusInTransit, RailInTransit, "", domain.StatusInTransit, "2026-12-01", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := submittingPayout(tt.give)
			p.Submitting = false
			was := day("2026-12-01")
			p.ExpectedArrival = &was
			st := &arrivalStore{gateStore: gateStore{readStore: readStore{p: p}}}
			rs := RailStatus{State: tt.railState}
			if tt.railDate != "" {
				rs.ExpectedArrival = day(tt.railDate)
			}
			a := testPayouts(st, coveringLedger{})
			a.Rail = &heldRail{st: rs}
			got, err := a.Follow(context.Background(), "po_1")
			if err != nil || got != tt.wantStatus || st.p.Status != tt.wantStatus {
				t.Fatalf("Follow: %q, %v, stored %q; want %q", got, err, st.p.Status, tt.wantStatus)
			}
			if st.p.ExpectedArrival == nil || !st.p.ExpectedArrival.Equal(day(tt.wantDate)) {
				t.Fatalf("rail now says %s: expected arrival %v; want %s", tt.railDate, dateOf(st.p.ExpectedArrival), tt.wantDate)
			}
			named := strings.Contains(st.reason, tt.wantDate) && strings.Contains(st.reason, "2026-12-01")
			if named != tt.wantNote {
				t.Fatalf("history note %q names the change %s → %s: %v; want %v", st.reason, "2026-12-01", tt.wantDate, named, tt.wantNote)
			}
			if !tt.wantNote && len(st.notes) != 0 {
				t.Fatalf("arrival date kept, yet history %q written", st.notes)
			}
		})
	}
}

func dateOf(d *time.Time) string {
	if d == nil {
		return "none"
	}
	return d.Format(time.DateOnly)
}
