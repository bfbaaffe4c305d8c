package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// readStore answers GetPayout with p, or with err when it is set.
type readStore struct {
	Store
	p   domain.Payout
	err error
}

func (s *readStore) GetPayout(context.Context, string) (domain.Payout, error) { return s.p, s.err }
func (s *readStore) GetMethod(context.Context, string) (domain.ProviderMethod, error) {
	return domain.ProviderMethod{ProviderID: "p-1", Method: domain.Method{Type: domain.MethodAlipay, AlipayID: "13800000001", AccountName: "X"}}, nil
}

// coveringLedger has available and answers every transfer with transfer.
type coveringLedger struct {
	available decimal.Decimal
	transfer  error
}

func (l coveringLedger) Available(context.Context, string, string) (decimal.Decimal, error) {
	return l.available, nil
}
func (l coveringLedger) Transfer(context.Context, domain.LedgerTransfer) error { return l.transfer }

func submittingPayout(status string) domain.Payout {
	return domain.Payout{ID: "po_1", ProviderID: "p-1", Currency: "CNY", Net: decimal.RequireFromString("500.00"),
		Status: status, Submitting: true, Attempt: 1, RailRef: "po_1-1"}
}

func testPayouts(st Store, l coveringLedger) *Payouts {
	return &Payouts{Store: st, Ledger: l, Rail: &bookRail{name: "r", refs: map[string]bool{}},
		Clock: clock.System{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// A failure to read the payout (the database restarting, a failover) is
// tried again by Submit and Follow, as by Prepare; only a payout that does
// not exist is given up. Given up (a permanent error ends the payout's
// workflow), a payout stayed created and submitting, or submitted, with
// nothing to move it: perhaps paid at the rail after a lost answer, the
// ledger never told.
func TestSubmitAndFollowRetryAFailedRead(t *testing.T) {
	ctx := context.Background()
	st := &readStore{err: errors.New("read tcp 10.0.0.5:5432: connection reset by peer")}
	a := testPayouts(st, coveringLedger{available: decimal.NewFromInt(1000)})
	st.p = submittingPayout(domain.StatusCreated)
	if _, err := a.Submit(ctx, "po_1"); err == nil || errors.Is(err, ErrPermanent) {
		t.Fatalf("Submit on a failed read: %v, want an error tried again", err)
	}
	st.p = submittingPayout(domain.StatusInTransit)
	if _, err := a.Follow(ctx, "po_1"); err == nil || errors.Is(err, ErrPermanent) {
		t.Fatalf("Follow on a failed read: %v, want an error tried again", err)
	}
	st.err = apperr.ErrNotFound
	if _, err := a.Submit(ctx, "po_1"); !errors.Is(err, ErrPermanent) {
		t.Fatalf("Submit of a payout that does not exist: %v, want a permanent error", err)
	}
	if _, err := a.Follow(ctx, "po_1"); !errors.Is(err, ErrPermanent) {
		t.Fatalf("Follow of a payout that does not exist: %v, want a permanent error", err)
	}
}

// The ledger refused moving the payout to in_transit (another payout held
// available), but available covers it when Submit reads it again (a credit
// landed, or the other payout was canceled): Submit tries again. It gave up
// (the ledger's refusal is permanent), leaving the payout created and
// submitting for good.
func TestSubmitRefusedButCoveredIsTriedAgain(t *testing.T) {
	st := &readStore{p: submittingPayout(domain.StatusCreated)}
	refused := Permanent(Refused(errors.New("rpc error: code = InvalidArgument desc = provider:p-1:available would go negative")))
	a := testPayouts(st, coveringLedger{available: decimal.NewFromInt(1000), transfer: refused})
	if _, err := a.Submit(context.Background(), "po_1"); err == nil || errors.Is(err, ErrPermanent) {
		t.Fatalf("Submit refused but covered: %v, want an error tried again", err)
	}
}
