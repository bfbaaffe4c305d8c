package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// resolveStore is failureStore holding a flagged payout: GetPayout answers
// it flagged, Lock answers locked (the payout as the workflow left it
// meanwhile, when set), and the flag is locked and resolved in place.
type resolveStore struct {
	failureStore
	locked *domain.Payout
}

func (s *resolveStore) Update(_ context.Context, fn func(Tx) error) error { return fn(s) }
func (s *resolveStore) Lock(context.Context, string) (domain.Payout, error) {
	if s.locked != nil {
		return *s.locked, nil
	}
	return s.p, nil
}
func (s *resolveStore) LockRailAmountFlag(ctx context.Context, id string, attempt int) (domain.RailAmountFlag, error) {
	return s.RailAmountFlag(ctx, id, attempt)
}
func (s *resolveStore) ResolveRailAmountFlag(_ context.Context, f domain.RailAmountFlag) error {
	if s.flag.Resolved() {
		return apperr.ErrConflict
	}
	s.flag = &f
	return nil
}

// flaggedPayout is po_1 submitted, flagged: its rail holds 480.00 CNY
// under its reference, its net is 500.00.
func flaggedPayout() (domain.Payout, *domain.RailAmountFlag) {
	p := submittingPayout(domain.StatusSubmitted)
	p.FailureCode, p.FailureMessage = domain.FailRailAmountMismatch, "alipay holds po_1-1 at 480.00 CNY, the payout's net is 500.00 CNY"
	return p, &domain.RailAmountFlag{PayoutID: p.ID, Attempt: p.Attempt, Rail: "alipay", RailAmount: decimal.RequireFromString("480.00"),
		RailCurrency: "CNY", FlaggedAt: time.Now().Add(-time.Hour)}
}

// keysLedger records the keys of the transfers posted.
type keysLedger struct{ keys []string }

func (l *keysLedger) Available(context.Context, string, string) (decimal.Decimal, error) {
	return decimal.Zero, nil
}
func (l *keysLedger) Transfer(_ context.Context, t domain.LedgerTransfer) error {
	l.keys = append(l.keys, t.Key)
	return nil
}

var resolution = RailAmountResolution{PayoutID: "po_1", RailAmount: decimal.RequireFromString("480.00"),
	Reason: "bill 2026-01 line 7", By: "fin-1"}

// Finance's resolution posts nothing: the payout's workflow is the only
// poster of its movements. Resolve posted the paid movement (in_transit to
// bank:client) after an unlocked read, then locked: a workflow that had
// meanwhile seen the rail fail the reference had posted -failed (in_transit
// back to available) and moved it to failed; resolve answered 409, its
// paid posting made, the net out of in_transit twice and payable again.
func TestResolvingAFlaggedPayoutPostsNothing(t *testing.T) {
	t.Run("failed by its workflow meanwhile", func(t *testing.T) {
		p, flag := flaggedPayout()
		failed := p
		failed.Status, failed.FailureCode, failed.FailureMessage = domain.StatusFailed, domain.FailAccountFrozen, "frozen"
		st := &resolveStore{failureStore: failureStore{gateStore: gateStore{readStore: readStore{p: p}, flag: flag}}, locked: &failed}
		l := &keysLedger{}
		a := &Payouts{Store: st, Ledger: l, Rail: &heldRail{}, Clock: clock.System{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		if _, err := a.ResolveRailAmountMismatch(context.Background(), resolution); !errors.Is(err, apperr.ErrConflict) {
			t.Errorf("resolve a payout failed meanwhile: %v; want a conflict", err)
		}
		if len(l.keys) != 0 || st.flag.Resolved() {
			t.Fatalf("resolve a payout failed meanwhile: ledger transfers %q, flag resolved %v; want none, open", l.keys, st.flag.Resolved())
		}
	})
	t.Run("flagged", func(t *testing.T) {
		p, flag := flaggedPayout()
		st := &resolveStore{failureStore: failureStore{gateStore: gateStore{readStore: readStore{p: p}, flag: flag}}}
		l := &keysLedger{}
		rail := &heldRail{st: RailStatus{State: RailPaid, Currency: "CNY", Amount: decimal.RequireFromString("480.00")}}
		a := &Payouts{Store: st, Ledger: l, Rail: rail, Clock: clock.System{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		for i := range 2 { // the same call again answers the payout as it is
			got, err := a.ResolveRailAmountMismatch(context.Background(), resolution)
			if err != nil || got.Status != domain.StatusSubmitted {
				t.Fatalf("resolve (call %d): %s, %v; want it submitted, for its workflow to record paid", i+1, got.Status, err)
			}
		}
		if len(l.keys) != 0 {
			t.Fatalf("resolve made ledger transfers %q; want none: the paid posting is its workflow's", l.keys)
		}
		if !st.flag.Resolved() || st.flag.ResolvedBy != "fin-1" || st.flag.Reason != resolution.Reason || len(st.notes) != 1 ||
			!strings.Contains(st.notes[0], resolution.Reason) || !strings.Contains(st.notes[0], "20.00") {
			t.Fatalf("flag %+v, history notes %q; want resolved by fin-1 for %q, noted once with the difference", *st.flag, st.notes, resolution.Reason)
		}
		// The workflow, woken, takes the rail's 480.00 as resolved and posts the paid movement itself.
		if got, err := a.Follow(context.Background(), "po_1"); err != nil || got != domain.StatusPaid {
			t.Fatalf("follow after the resolution: %q, %v; want paid", got, err)
		}
		want := domain.LedgerKey("po_1", 1, domain.StatusPaid)
		if len(l.keys) != 1 || l.keys[0] != want || st.p.FailureCode != "" || st.p.FailureMessage != "" || st.p.PaidAt == nil {
			t.Fatalf("after its workflow: transfers %q (want %s), stored %s failure %q %q paid_at %v; want paid, no failure",
				l.keys, want, st.p.Status, st.p.FailureCode, st.p.FailureMessage, st.p.PaidAt)
		}
	})
}

// A flagged payout whose rail answers paid without an amount is not taken
// until finance resolves it: advance compared amounts only when the rail
// gave one, so it posted paid at the net, cleared the flag and noted
// "taken as finance resolved", and the open-flag gauge (which reads the
// failure code) lost it.
func TestAFlaggedPayoutIsNotTakenOnAnAnswerWithoutAmount(t *testing.T) {
	p, flag := flaggedPayout()
	st := &resolveStore{failureStore: failureStore{gateStore: gateStore{readStore: readStore{p: p}, flag: flag}}}
	l := &keysLedger{}
	rail := &heldRail{st: RailStatus{State: RailPaid}}
	a := &Payouts{Store: st, Ledger: l, Rail: rail, Clock: clock.System{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	got, err := a.Follow(context.Background(), "po_1")
	if err != nil || got != domain.StatusSubmitted || len(l.keys) != 0 || st.p.FailureCode != domain.FailRailAmountMismatch {
		t.Fatalf("follow, unresolved, the rail answering paid without an amount: %q, %v, transfers %q, failure %q; want submitted, none, still flagged",
			got, err, l.keys, st.p.FailureCode)
	}
	if _, err := a.ResolveRailAmountMismatch(context.Background(), resolution); err != nil {
		t.Fatal(err)
	}
	if got, err := a.Follow(context.Background(), "po_1"); err != nil || got != domain.StatusPaid || len(l.keys) != 1 {
		t.Fatalf("follow once resolved: %q, %v, transfers %q; want paid, the paid posting", got, err, l.keys)
	}
}
