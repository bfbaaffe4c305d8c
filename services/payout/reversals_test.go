package payout

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/deadletter"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/subjects"
	"github.com/gpubill/gpubill/pkg/testkit"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	"github.com/gpubill/gpubill/services/payout/internal/adapters/postgres"
	"github.com/gpubill/gpubill/services/payout/internal/app"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
	"github.com/gpubill/gpubill/services/payout/internal/ports"
)

// bulkCounting is the journal counting the bulk reads a settled-outside
// pass makes (Entries).
type bulkCounting struct {
	entries
	bulk atomic.Int32
}

func (e *bulkCounting) Entries(ctx context.Context, ids []string) ([]domain.LedgerEntry, error) {
	e.bulk.Add(1)
	return e.entries.Entries(ctx, ids)
}

// Finance reverses tx-p9, the entry po-9 was settled outside by: the
// ledger publishes ledger.reversed.tx-p9 (its outbox, with the reversal)
// and payout's durable consumer moves po-9 back to failed at once, with
// no settled-outside pass (one message per reversal, no ledger read): the
// pass read every claim ever made, every five minutes, and is now only a
// backstop over a window of them. A reversal of an entry no payout claims
// moves nothing; a message naming no transaction is dead-lettered.
func TestReversalOfAClaimedEntryFailsThePayoutWithoutAPass(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t)
	pool := testkit.NewMigratedPool(t, "payout", migrations.For("payout"))
	if _, err := pool.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission,
			tax_withheld, net, status, failure_code, attempt, workflow_started, created_at, updated_at) values
		('po-9', 'p-9', 'cyc-20260101', 'CNY', 1000, 250, 150, 600.00, 'failed', 'account_frozen', 2, true, now() - interval '3 days', now() - interval '2 days'),
		('po-7', 'p-7', 'cyc-20260101', 'CNY', 1000, 250, 150, 600.00, 'returned', 'account_closed', 1, true, now() - interval '3 days', now() - interval '2 days')`); err != nil {
		t.Fatal(err)
	}
	journal := &bulkCounting{entries: entries{
		"tx-p9": manualPayment("tx-p9", "p-9", "600.00", "CNY"),
		"tx-p7": manualPayment("tx-p7", "p-7", "600.00", "CNY"),
	}}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s := &postgres.Store{Pool: pool}
	a := &app.Payouts{Store: s, Entries: journal, Clock: clock.NewManual(time.Now()), Log: log}
	for _, x := range [][2]string{{"po-9", "tx-p9"}, {"po-7", "tx-p7"}} {
		if _, err := a.SettleOutside(ctx, app.OutsideSettlement{PayoutID: x[0], TransactionID: x[1], Reason: "paid by hand, ICBC ref 77", By: "fin-1"}); err != nil {
			t.Fatal(err)
		}
	}
	js := testkit.NewJetStream(t)
	if err := natsx.EnsureStreams(ctx, js.JS, natsx.StreamLedger); err != nil {
		t.Fatal(err)
	}
	go func() {
		if err := ports.ConsumeReversals(ctx, js.JS, a, log, deadletter.New(pool, postgres.Schema, log)); err != nil {
			t.Error(err)
		}
	}()
	publish := func(id, subject string, payload []byte) {
		t.Helper()
		m := nats.NewMsg(subject)
		m.Header.Set(nats.MsgIdHdr, id)
		m.Data = payload
		if _, err := js.JS.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	reversal := func(id string) []byte {
		b, err := proto.Marshal(&eventsv1.LedgerPosted{TransactionId: id})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	e := journal.entries["tx-p9"]
	e.ReversedBy = "tx-rev"
	journal.entries["tx-p9"] = e
	publish("ledger-reversed-tx-unclaimed", subjects.LedgerReversed.Of("tx-unclaimed"), reversal("tx-rev0"))
	publish("ledger-reversed-tx-rev", subjects.LedgerReversed.Of("tx-p9"), reversal("tx-rev"))
	var p domain.Payout
	testkit.Eventually(t, 10*time.Second, func() bool {
		var err error
		p, err = s.GetPayout(ctx, "po-9")
		return err == nil && p.Status == domain.StatusFailed
	}, "po-9 still %s after ledger.reversed.tx-p9; want failed", p.Status)
	last := p.History[len(p.History)-1]
	if p.FailureCode != "account_frozen" || !strings.Contains(last.Note, "tx-p9") || !strings.Contains(last.Note, "tx-rev") {
		t.Fatalf("po-9 after its entry was reversed: %s (%s), last history %+v; want failed account_frozen naming tx-p9 and tx-rev",
			p.Status, p.FailureCode, last)
	}
	if n := journal.bulk.Load(); n != 0 {
		t.Fatalf("the reversal was acted on with %d bulk ledger reads; want 0 (no settled-outside pass)", n)
	}
	if q, err := s.GetPayout(ctx, "po-7"); err != nil || q.Status != domain.StatusSettledOutside {
		t.Fatalf("po-7, its entry not reversed: %s %v, want settled_outside", q.Status, err)
	}
	if by, err := claimsOf(ctx, s, "po-9"); err != nil || len(by) != 0 {
		t.Fatalf("po-9's claims after the reversal: %v %v; want none (tx-p9 released)", by, err)
	}

	publish("ledger-reversed-bad", subjects.LedgerReversed.Of("tx-p7"), []byte{0xff, 0xff, 0xff})
	testkit.Eventually(t, 10*time.Second, func() bool {
		var n int
		err := pool.QueryRow(ctx, `select count(*) from payout.dead_letters where consumer = $1 and message_id = 'ledger-reversed-bad'`,
			ports.ReversalsConsumerName).Scan(&n)
		return err == nil && n == 1
	}, "an undecodable ledger.reversed message not dead-lettered")
	if q, err := s.GetPayout(ctx, "po-7"); err != nil || q.Status != domain.StatusSettledOutside {
		t.Fatalf("po-7 after an undecodable message naming tx-p7: %s %v, want settled_outside", q.Status, err)
	}
}

// claimsOf lists the transactions payout id claims.
func claimsOf(ctx context.Context, s *postgres.Store, id string) ([]string, error) {
	var by []string
	err := s.Update(ctx, func(tx app.Tx) error {
		var err error
		by, err = tx.SettledOutsideBy(ctx, id)
		return err
	})
	return by, err
}

// A reversal committing while :settle-outside claims its entry is never
// lost: the claim takes the entry's lock before its last ledger read and
// holds it to its commit, and the reversal's consumer reads the claims of
// the entries it names under the same lock. Read while the claim was in
// flight, the claim was not there yet, and the reversal (which the claim's
// read had not seen) was skipped for good.
func TestReversalWaitsForAClaimInFlight(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t)
	pool := testkit.NewMigratedPool(t, "payout", migrations.For("payout"))
	if _, err := pool.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission,
			tax_withheld, net, status, failure_code, attempt, workflow_started, created_at, updated_at) values
		('po-6', 'p-6', 'cyc-20260101', 'CNY', 1000, 250, 150, 600.00, 'failed', 'account_closed', 1, true, now() - interval '3 days', now() - interval '2 days')`); err != nil {
		t.Fatal(err)
	}
	s := &postgres.Store{Pool: pool}
	claimed, commit, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- s.Update(ctx, func(tx app.Tx) error {
			if _, err := tx.Lock(ctx, "po-6"); err != nil {
				return err
			}
			if err := tx.LockClaimEntries(ctx, []string{"TX-P6"}); err != nil {
				return err
			}
			if err := tx.ClaimSettledOutside(ctx, "po-6", "TX-P6", "paid by hand", "fin-1", time.Now()); err != nil {
				return err
			}
			close(claimed)
			<-commit
			return nil
		})
	}()
	<-claimed
	var once sync.Once
	release := func() { once.Do(func() { close(commit) }) }
	defer release() // a failure below lets the claim commit, and the pool close
	read := make(chan []app.SettledOutsideClaim, 1)
	go func() {
		cs, err := s.ClaimHolders(ctx, []string{"tx-p6"})
		if err != nil {
			t.Error(err)
		}
		read <- cs
	}()
	select {
	case cs := <-read:
		t.Fatalf("the claims of tx-p6 read while its claim was in flight: %v; want the read to wait for the claim's commit", cs)
	case <-time.After(300 * time.Millisecond):
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if cs := <-read; len(cs) != 1 || cs[0] != (app.SettledOutsideClaim{PayoutID: "po-6", TransactionID: "TX-P6"}) {
		t.Fatalf("the claims of tx-p6 once its claim committed: %v; want po-6's of TX-P6", cs)
	}
}
