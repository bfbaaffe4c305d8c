package app

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// holdStore is gateStore keeping the history notes, with the bank queue's
// lock and a hold of the provider ("" : none) that HoldQueued reads.
type holdStore struct {
	gateStore
	hold   string
	locked bool // LockBankQueue taken before the payout's lock
	notes  []string
}

func (s *holdStore) Update(_ context.Context, fn func(Tx) error) error {
	s.locked = false
	return fn(s)
}
func (s *holdStore) LockBankQueue(context.Context) error { s.locked = true; return nil }
func (s *holdStore) Move(ctx context.Context, p *domain.Payout, to, note string, at time.Time) error {
	s.notes = append(s.notes, note)
	return s.gateStore.Move(ctx, p, to, note, at)
}
func (s *holdStore) SetArrival(_ context.Context, p *domain.Payout, note string, _ time.Time) error {
	s.p = *p
	s.notes = append(s.notes, note)
	return nil
}
func (s *holdStore) HoldQueued(_ context.Context, p *domain.Payout, _ time.Time) error {
	if !s.locked {
		return errNotLocked
	}
	if note := domain.HeldQueuedNote(s.hold); s.hold != "" && (p.Reason != note || p.ExpectedArrival != nil) {
		p.Reason, p.ExpectedArrival = note, nil
		s.p = *p
		s.notes = append(s.notes, note)
	}
	return nil
}

var errNotLocked = errors.New("HoldQueued without the bank queue's lock")

// A payout being submitted when its provider is held (the hold answered it
// in flight) whose bank transfer lands in the bank-file queue is held by
// the cut: its history says so after its submission, and it has no
// arrival date while held, as a payout held in the queue (PutHold). It
// read "submitted … via bank" with the date of the cutoff after its
// queuing, and waited without a word. The store reads the hold again under
// the bank queue's lock (a release meanwhile is not noted).
func TestSubmittedIntoAHeldQueueSaysHeld(t *testing.T) {
	held := domain.HeldQueuedNote("fraud dispute")
	tests := []struct {
		name      string
		give      string // the payout's status
		railHeld  string // the rail's answer: held for this reason ("": not held, arriving 2026-12-03)
		storeHold string // the hold the store reads under the lock
		wantNotes []string
		wantDate  string
	}{
		{"submitted into a held queue", domain.StatusCreated, "fraud dispute", "fraud dispute",
			[]string{"submitted to alipay as po_1 via alipay ****0001", held}, "none"},
		{"held in the queue, its date still the queuing's", domain.StatusSubmitted, "fraud dispute", "fraud dispute",
			[]string{held}, "none"},
		{"released before the lock", domain.StatusSubmitted, "fraud dispute", "", nil, "2026-12-01"},
		{"not held", domain.StatusSubmitted, "", "", []string{"alipay: expected arrival 2026-12-03 (was 2026-12-01)"}, "2026-12-03"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := submittingPayout(tt.give)
			p.RailRef = ""
			if tt.give == domain.StatusSubmitted {
				p.RailRef = "po_1"
				was := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
				p.ExpectedArrival = &was
			}
			st := &holdStore{gateStore: gateStore{readStore: readStore{p: p}}, hold: tt.storeHold}
			rs := RailStatus{State: RailAccepted, Held: tt.railHeld}
			if tt.railHeld == "" {
				rs.ExpectedArrival = time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
			}
			a := testPayouts(st, coveringLedger{})
			a.Rail = &heldRail{st: rs}
			var got string
			var err error
			if tt.give == domain.StatusCreated {
				got, err = a.Submit(context.Background(), "po_1")
			} else {
				got, err = a.Follow(context.Background(), "po_1")
			}
			if err != nil || got != domain.StatusSubmitted {
				t.Fatalf("answered %q, %v; want submitted", got, err)
			}
			if !slices.Equal(st.notes, tt.wantNotes) || dateOf(st.p.ExpectedArrival) != tt.wantDate {
				t.Fatalf("history %q, expected arrival %s; want %q, %s", st.notes, dateOf(st.p.ExpectedArrival), tt.wantNotes, tt.wantDate)
			}
		})
	}
}
