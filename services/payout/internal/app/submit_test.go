package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
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

// KYCStatus answers verified: the provider's KYC does not stop Submit.
func (s *readStore) KYCStatus(context.Context, string) (string, error) {
	return domain.KYCVerified, nil
}
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

// gateStore is readStore whose transactions lock and move its payout.
type gateStore struct {
	readStore
	Tx     // the rest, unused here
	reason string
	flag   *domain.RailAmountFlag
}

func (s *gateStore) Update(_ context.Context, fn func(Tx) error) error   { return fn(s) }
func (s *gateStore) Lock(context.Context, string) (domain.Payout, error) { return s.p, nil }
func (s *gateStore) Move(_ context.Context, p *domain.Payout, to, note string, _ time.Time) error {
	p.Status = to
	s.p, s.reason = *p, note
	return nil
}

// RailAmountFlag answers the flag FlagRailAmount kept (none: not found).
func (s *gateStore) RailAmountFlag(_ context.Context, id string, _ int) (domain.RailAmountFlag, error) {
	if s.flag == nil {
		return domain.RailAmountFlag{}, fmt.Errorf("payout %s: %w", id, apperr.ErrNotFound)
	}
	return *s.flag, nil
}
func (s *gateStore) FlagRailAmount(_ context.Context, f domain.RailAmountFlag) error {
	s.flag = &f
	return nil
}

// turnsLedger has available and answers the transfers with answers in
// turn, then nil.
type turnsLedger struct {
	available decimal.Decimal
	answers   []error
	n         int
}

func (l *turnsLedger) Available(context.Context, string, string) (decimal.Decimal, error) {
	return l.available, nil
}
func (l *turnsLedger) Transfer(context.Context, domain.LedgerTransfer) error {
	l.n++
	if l.n <= len(l.answers) {
		return l.answers[l.n-1]
	}
	return nil
}

// The ledger refused moving the payout to in_transit. Not covered by
// available, the payout waits at the gate for it. Covered when Submit reads
// available (a credit landed, or a payout that held it was canceled), it is
// posted again at once; refused again, the ledger refuses it for another
// reason, and it waits at the gate with ledger_refused. It was tried again
// without end, created and submitting, seen only in the activity's retries
// (and before that given up, created and submitting for good).
func TestSubmitRefusedByTheLedger(t *testing.T) {
	refused := Permanent(Refused(errors.New("rpc error: code = InvalidArgument desc = provider:p-1:available would go negative")))
	tests := []struct {
		name       string
		available  int64
		answers    []error
		wantStatus string
		wantReason string
		wantPosts  int
	}{
		{"not covered", 100, []error{refused}, domain.StatusActionRequired, domain.InsufficientAvailableReason(decimal.NewFromInt(100), decimal.RequireFromString("500.00"), "CNY"), 1},
		{"covered on the second post", 1000, []error{refused}, domain.StatusSubmitted, "", 2},
		{"refused while covered", 1000, []error{refused, refused}, domain.StatusActionRequired, domain.LedgerRefusedReason, 2},
		// Refused for good otherwise (an identity the ledger's guard
		// refuses, a key taken): it failed the workflow, the payout
		// created and submitting for good.
		{"identity refused", 1000, []error{Permanent(errors.New("rpc error: code = PermissionDenied desc = not allowed from 10.0.0.7"))},
			domain.StatusActionRequired, domain.LedgerRefusedReason, 1},
		{"key taken", 1000, []error{Permanent(errors.New("rpc error: code = Aborted desc = idempotency key payout-po_1-1-submitted holds another transaction"))},
			domain.StatusActionRequired, domain.LedgerRefusedReason, 1},
		// The same on the post after an overdraft refusal, available
		// covering it by then: it failed the workflow as above.
		{"covered, then refused for good", 1000, []error{refused, Permanent(errors.New("rpc error: code = Aborted desc = idempotency key payout-po_1-1-submitted holds another transaction"))},
			domain.StatusActionRequired, domain.LedgerRefusedReason, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &gateStore{readStore: readStore{p: submittingPayout(domain.StatusCreated)}}
			l := &turnsLedger{available: decimal.NewFromInt(tt.available), answers: tt.answers}
			rail := &bookRail{name: "r", refs: map[string]bool{}}
			a := &Payouts{Store: st, Ledger: l, Rail: rail, Clock: clock.System{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			counted := testutil.ToFloat64(ledgerRefusals.WithLabelValues(domain.StatusSubmitted))
			got, err := a.Submit(context.Background(), "po_1")
			if err != nil || got != tt.wantStatus || st.p.Status != tt.wantStatus || l.n != tt.wantPosts {
				t.Fatalf("Submit: %q, %v, stored %q after %d posts; want %q after %d", got, err, st.p.Status, l.n, tt.wantStatus, tt.wantPosts)
			}
			// Only a refusal while available covers it is counted on /metrics.
			want := counted
			if tt.wantReason == domain.LedgerRefusedReason {
				want++
			}
			if c := testutil.ToFloat64(ledgerRefusals.WithLabelValues(domain.StatusSubmitted)); c != want {
				t.Fatalf("gpubill_payout_ledger_refusals_total{step=\"submitted\"} went %v → %v; want %v", counted, c, want)
			}
			if tt.wantStatus == domain.StatusActionRequired && (st.reason != tt.wantReason || st.p.Submitting || len(rail.refs) != 0) {
				t.Fatalf("at the gate with %q, submitting %v, rail saw %v; want %q, not submitting, no rail call", st.reason, st.p.Submitting, rail.refs, tt.wantReason)
			}
		})
	}
}

// paidRail answers every reference paid.
type paidRail struct{ bookRail }

func (r *paidRail) Query(_ context.Context, ref string) (RailStatus, error) {
	return RailStatus{Reference: ref, State: RailPaid}, nil
}

// The rail paid the payout and the ledger refuses to record it (bank:client
// would go negative: renters on credit): the rail's outcome stands, so the
// posting is tried again until the ledger takes it, the payout showing the
// status it had. The refusal was permanent: it ended the payout's workflow,
// the money paid at the rail and in in_transit for good.
func TestLedgerRefusingWhatTheRailDidIsTriedAgain(t *testing.T) {
	refused := Permanent(Refused(errors.New("rpc error: code = InvalidArgument desc = bank:client would go negative")))
	st := &gateStore{readStore: readStore{p: submittingPayout(domain.StatusInTransit)}}
	l := &turnsLedger{answers: []error{refused}}
	var log strings.Builder
	a := &Payouts{Store: st, Ledger: l, Rail: &paidRail{}, Clock: clock.System{}, Log: slog.New(slog.NewTextHandler(&log, nil))}
	counted := testutil.ToFloat64(ledgerRefusals.WithLabelValues(domain.StatusPaid))
	_, err := a.Follow(context.Background(), "po_1")
	if c := testutil.ToFloat64(ledgerRefusals.WithLabelValues(domain.StatusPaid)); c != counted+1 {
		t.Fatalf("gpubill_payout_ledger_refusals_total{step=\"paid\"} went %v → %v; want one more", counted, c)
	}
	if err == nil || errors.Is(err, ErrPermanent) || st.p.Status != domain.StatusInTransit {
		t.Fatalf("Follow with the paid posting refused: %v, stored %q; want an error tried again, in_transit", err, st.p.Status)
	}
	if !strings.Contains(log.String(), "level=ERROR") || !strings.Contains(log.String(), "bank:client would go negative") {
		t.Fatalf("log %q; want the refusal at ERROR", log.String())
	}
}

// heldRail holds every reference as st says (the amount it was sent
// before a restore) and counts submissions.
type heldRail struct {
	st      RailStatus
	submits int
}

func (r *heldRail) Name() string { return "alipay" }
func (r *heldRail) Submit(context.Context, Transfer) (RailStatus, error) {
	r.submits++
	return r.st, nil
}
func (r *heldRail) Query(_ context.Context, ref string) (RailStatus, error) {
	st := r.st
	st.Reference = ref
	return st, nil
}

// failureStore is gateStore recording failures set without a move.
type failureStore struct {
	gateStore
	notes []string
}

func (s *failureStore) Update(_ context.Context, fn func(Tx) error) error { return fn(s) }
func (s *failureStore) SetFailure(_ context.Context, p *domain.Payout, note string, _ time.Time) error {
	s.p, s.reason = *p, note
	s.notes = append(s.notes, note)
	return nil
}

// A rail holding the payout's reference at another amount than its net (a
// payout made again after a restore at another net) is never taken as
// paying the payout, on Submit's query and on Follow: the payout stays
// submitted (entered from created, its submission posted), flagged
// rail_amount_mismatch with both amounts, no other posting made, nothing
// submitted again, counted once. It was recorded paid at its own net. A
// rail that failed the reference moved no money: the payout fails as any
// other; a rail saying nothing of the amount, or the same one, is taken.
func TestRailAmountNotThePayoutsIsNotTaken(t *testing.T) {
	cny := func(s string) decimal.Decimal { return decimal.RequireFromString(s) }
	tests := []struct {
		name        string
		give        string // the payout's status
		rail        RailStatus
		wantStatus  string
		wantFailure string
		wantPosts   int // ledger postings
		wantCounted float64
	}{
		{"submit finds it paid at another net", domain.StatusCreated, RailStatus{State: RailPaid, Currency: "CNY", Amount: cny("480.00")},
			domain.StatusSubmitted, domain.FailRailAmountMismatch, 1, 1},
		{"submit finds it in transit at another net", domain.StatusCreated, RailStatus{State: RailInTransit, Currency: "CNY", Amount: cny("480.00")},
			domain.StatusSubmitted, domain.FailRailAmountMismatch, 1, 1},
		{"submit finds it in another currency", domain.StatusCreated, RailStatus{State: RailPaid, Currency: "USD", Amount: cny("500.00")},
			domain.StatusSubmitted, domain.FailRailAmountMismatch, 1, 1},
		{"follow finds it paid at another net", domain.StatusSubmitted, RailStatus{State: RailPaid, Currency: "CNY", Amount: cny("480.00")},
			domain.StatusSubmitted, domain.FailRailAmountMismatch, 0, 1},
		{"follow finds it returned at another net", domain.StatusInTransit, RailStatus{State: RailReturned, Currency: "CNY", Amount: cny("480.00"),
			FailureCode: domain.FailAccountClosed}, domain.StatusInTransit, domain.FailRailAmountMismatch, 0, 1},
		{"failed at another net", domain.StatusSubmitted, RailStatus{State: RailFailed, Currency: "CNY", Amount: cny("480.00"),
			FailureCode: domain.FailAccountFrozen}, domain.StatusFailed, domain.FailAccountFrozen, 1, 0},
		{"submit finds it failed at another net", domain.StatusCreated, RailStatus{State: RailFailed, Currency: "CNY", Amount: cny("480.00"),
			FailureCode: domain.FailAccountFrozen}, domain.StatusFailed, domain.FailAccountFrozen, 2, 0},
		{"paid at its net", domain.StatusSubmitted, RailStatus{State: RailPaid, Currency: "CNY", Amount: cny("500")},
			domain.StatusPaid, "", 1, 0},
		{"paid, no amount said", domain.StatusSubmitted, RailStatus{State: RailPaid}, domain.StatusPaid, "", 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &failureStore{gateStore: gateStore{readStore: readStore{p: submittingPayout(tt.give)}}}
			l := &turnsLedger{available: decimal.NewFromInt(1000)}
			rail := &heldRail{st: tt.rail}
			a := &Payouts{Store: st, Ledger: l, Rail: rail, Clock: clock.System{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			counted := testutil.ToFloat64(railAmountMismatches.WithLabelValues("alipay"))
			step := a.Follow
			if tt.give == domain.StatusCreated {
				step = a.Submit
			}
			for range 2 { // the workflow's next poll (reading what the first stored) changes nothing more
				if got, err := step(context.Background(), "po_1"); err != nil || got != tt.wantStatus {
					t.Fatalf("%q, %v; want %q", got, err, tt.wantStatus)
				}
			}
			if st.p.Status != tt.wantStatus || st.p.FailureCode != tt.wantFailure || l.n != tt.wantPosts || rail.submits != 0 {
				t.Fatalf("stored %s %q after %d postings, %d submissions; want %s %q after %d, none",
					st.p.Status, st.p.FailureCode, l.n, rail.submits, tt.wantStatus, tt.wantFailure, tt.wantPosts)
			}
			if c := testutil.ToFloat64(railAmountMismatches.WithLabelValues("alipay")) - counted; c != tt.wantCounted {
				t.Fatalf("gpubill_payout_rail_amount_mismatches_total{rail=\"alipay\"} rose by %v; want %v", c, tt.wantCounted)
			}
			if tt.wantFailure == domain.FailRailAmountMismatch &&
				(!strings.Contains(st.p.FailureMessage, tt.rail.Amount.StringFixed(2)+" "+tt.rail.Currency) || !strings.Contains(st.p.FailureMessage, "500.00 CNY")) {
				t.Fatalf("failure message %q; want both amounts", st.p.FailureMessage)
			}
			if len(st.notes) > 1 {
				t.Fatalf("the flag recorded %d times: %q", len(st.notes), st.notes)
			}
		})
	}
}
