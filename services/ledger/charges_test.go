package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/testkit"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	"github.com/gpubill/gpubill/services/ledger"
	"github.com/gpubill/gpubill/services/ledger/internal/ports"
)

func charge(id, renter, provider, cycle, amount string) *eventsv1.RatedCharge {
	return &eventsv1.RatedCharge{ChargeId: id, LeaseId: "lease-" + id, RenterId: renter, ProviderId: provider,
		CycleId: cycle, Currency: "USD", Amount: amount, EffectiveAt: timestamppb.New(time.Date(2026, 11, 20, 23, 30, 0, 0, time.UTC))}
}

func batchMsg(t testing.TB, id string, cs ...*eventsv1.RatedCharge) ports.ChargesMessage {
	b, err := proto.Marshal(&eventsv1.ChargesRatedBatch{BatchId: id, Charges: cs})
	if err != nil {
		t.Fatal(err)
	}
	return ports.ChargesMessage{ID: id, Payload: b}
}

func (f *fixture) count(t testing.TB, q string, args ...any) int {
	t.Helper()
	var n int
	if err := f.pool.QueryRow(f.ctx, q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// texts is the one text column of every row q selects.
func (f *fixture) texts(t testing.TB, q string, args ...any) []string {
	t.Helper()
	rows, err := f.pool.Query(f.ctx, q, args...)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestChargesPostedExactlyOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.deposit(t, "r-1", "10", "USD", "top")
	const cyc = "cyc-20261112"
	m := batchMsg(t, "batch-1",
		charge("ch-1", "r-1", "p-1", cyc, "4.00"),
		charge("ch-2", "r-1", "p-2", cyc, "0"), // nothing to post
		charge("ch-3", "r-1", "p-1", cyc, "2.50"))
	n, err := ports.PostCharges(f.ctx, f.app, []ports.ChargesMessage{m, m}) // the same message twice in one fetch
	if err != nil || n != 2 {
		t.Fatalf("first delivery posted %d, %v; want 2", n, err)
	}
	// Redelivered later: the inbox knows the message.
	if n, err := ports.PostCharges(f.ctx, f.app, []ports.ChargesMessage{m}); err != nil || n != 0 {
		t.Fatalf("redelivery posted %d, %v; want 0", n, err)
	}
	// The same charge in another message (a producer retry): the charge id guards.
	if n, err := ports.PostCharges(f.ctx, f.app, []ports.ChargesMessage{batchMsg(t, "batch-2", charge("ch-1", "r-1", "p-1", cyc, "4.00"))}); err != nil || n != 0 {
		t.Fatalf("charge replay posted %d, %v; want 0", n, err)
	}
	wantBalance(t, f, "renter:r-1:wallet", "USD", "3.50")
	wantBalance(t, f, "provider:p-1:pending:"+cyc, "USD", "6.50")
	if got := f.count(t, `select count(*) from ledger.transactions where kind = 'charge'`); got != 2 {
		t.Fatalf("%d charge transactions, want 2", got)
	}
	// Depletion: the next charge takes the wallet from 3.50 to -0.50.
	if _, err := ports.PostCharges(f.ctx, f.app, []ports.ChargesMessage{batchMsg(t, "batch-3", charge("ch-4", "r-1", "p-1", cyc, "4.00"))}); err != nil {
		t.Fatal(err)
	}
	if got := f.count(t, `select count(*) from ledger.outbox where subject = 'billing.wallet.depleted.r-1'`); got != 1 {
		t.Fatalf("%d depletion events, want 1", got)
	}
	// Still negative: not announced again.
	if _, err := ports.PostCharges(f.ctx, f.app, []ports.ChargesMessage{batchMsg(t, "batch-4", charge("ch-5", "r-1", "p-1", cyc, "1.00"))}); err != nil {
		t.Fatal(err)
	}
	if got := f.count(t, `select count(*) from ledger.outbox where subject = 'billing.wallet.depleted.r-1'`); got != 1 {
		t.Fatalf("%d depletion events after a second charge, want 1", got)
	}
	// One LedgerPostedBatch per class per write; the four charges posted
	// (not the replays) are each announced exactly once.
	if got := postedTransactions(t, f, "provider"); len(got) != 4 {
		t.Fatalf("ledger.posted.provider announced %d transactions %v, want 4", len(got), got)
	}
	if got := postedTransactions(t, f, "renter"); len(got) != 4 {
		t.Fatalf("ledger.posted.renter announced %d charge transactions %v, want 4", len(got), got)
	}
	checkInvariants(t, f)
}

// fixtureWithCharge050 is a fixture whose ledger has posted charge ch-050
// (r-1 → p-1 in cycle cyc, 1.00) from message batch-1.
func fixtureWithCharge050(t *testing.T, cyc string) *fixture {
	t.Helper()
	f := newFixture(t, nil)
	if got, err := ports.PostCharges(f.ctx, f.app, []ports.ChargesMessage{batchMsg(t, "batch-1", charge("ch-050", "r-1", "p-1", cyc, "1.00"))}); err != nil || got != 1 {
		t.Fatalf("first charge posted %d, %v; want 1", got, err)
	}
	return f
}

// TestChargeReplayBesideNewCharges: a batch's journal rows are first
// copied in without skipping known idempotency keys; a replayed charge
// between new ones (in key order) must undo the rows copied before it and
// post the batch again, each new charge once, the replay not at all.
func TestChargeReplayBesideNewCharges(t *testing.T) {
	t.Parallel()
	const cyc, n = "cyc-20261112", 100 // n: a batch, copied (postgres.batchMin)
	f := fixtureWithCharge050(t, cyc)
	var cs []*eventsv1.RatedCharge
	for i := range n {
		cs = append(cs, charge(fmt.Sprintf("ch-%03d", i), "r-1", "p-1", cyc, "1.00")) // ch-050: posted by batch-1
	}
	if got, err := ports.PostCharges(f.ctx, f.app, []ports.ChargesMessage{batchMsg(t, "batch-2", cs...)}); err != nil || got != n-1 {
		t.Fatalf("batch with a replayed charge posted %d, %v; want %d", got, err, n-1)
	}
	wantBalance(t, f, "renter:r-1:wallet", "USD", "-100.00")
	wantBalance(t, f, "provider:p-1:pending:"+cyc, "USD", "100.00")
	if got := f.count(t, `select count(*) from ledger.transactions where kind = 'charge'`); got != n {
		t.Fatalf("%d charge transactions, want %d", got, n)
	}
	if got := postedTransactions(t, f, "provider"); len(got) != n {
		t.Fatalf("ledger.posted.provider announced %d transactions, want %d", len(got), n)
	}
	checkInvariants(t, f)
	chainWritten(t, f)
	if res, err := ledger.VerifyChain(f.ctx, f.pool); err != nil || !res.OK || res.Checked != n || res.Unchained != 0 {
		t.Fatalf("chain: %+v, %v; want %d links verified", res, err, n)
	}
}

// A charge id already posted, sent again with other content (another
// amount, renter, provider, cycle or currency), is no repeat: its message
// can never be posted and is named for the dead letters, the rest of the
// fetch posts without it. The same charge sent again changes nothing, as
// before. The repeat with another amount was skipped unseen: the ledger
// kept the first amount and no one learnt of the second.
func TestChargeIDRepeatedWithOtherContentIsPoison(t *testing.T) {
	t.Parallel()
	const cyc, n = "cyc-20261112", 100 // n: a batch, copied (postgres.batchMin)
	f := fixtureWithCharge050(t, cyc)
	var cs []*eventsv1.RatedCharge
	for i := range n {
		amount := "1.00"
		if i == 50 {
			amount = "7.00" // ch-050 again, another amount
		}
		cs = append(cs, charge(fmt.Sprintf("ch-%03d", i), "r-1", "p-1", cyc, amount))
	}
	other := batchMsg(t, "batch-3", charge("ch-200", "r-2", "p-1", cyc, "2.00"))
	got, err := ports.PostCharges(f.ctx, f.app, []ports.ChargesMessage{batchMsg(t, "batch-2", cs...), other})
	var poison *natsx.PoisonError
	if !errors.As(err, &poison) || len(poison.ByID) != 1 || poison.ByID["batch-2"] == nil || !errors.Is(poison.ByID["batch-2"], apperr.ErrConflict) {
		t.Fatalf("a fetch with ch-050 at another amount: posted %d, %v; want batch-2 named as poison (a conflict)", got, err)
	}
	if got := f.count(t, `select count(*) from ledger.transactions where kind = 'charge'`); got != 1 {
		t.Fatalf("%d charge transactions after the poisoned fetch, want 1 (it rolled back)", got)
	}
	if got, err := ports.PostCharges(f.ctx, f.app, []ports.ChargesMessage{other}); err != nil || got != 1 {
		t.Fatalf("the rest of the fetch posted %d, %v; want 1", got, err)
	}
	cs[50] = charge("ch-050", "r-1", "p-1", cyc, "1.00") // the same charge again: a repeat
	if got, err := ports.PostCharges(f.ctx, f.app, []ports.ChargesMessage{batchMsg(t, "batch-4", cs...)}); err != nil || got != n-1 {
		t.Fatalf("batch with a repeated charge posted %d, %v; want %d", got, err, n-1)
	}
	wantBalance(t, f, "renter:r-1:wallet", "USD", "-100.00")
	wantBalance(t, f, "renter:r-2:wallet", "USD", "-2.00")
	wantBalance(t, f, "provider:p-1:pending:"+cyc, "USD", "102.00")
	checkInvariants(t, f)
}

// TestChargeWithUnreadableGPUHoursIsPoison: a usage line's GPU-hours is
// what a provider statement shows; one that is not a decimal of at least 0
// was left out of the transaction's metadata without a word. Its message
// is poison now, the rest of the fetch posted.
func TestChargeWithUnreadableGPUHoursIsPoison(t *testing.T) {
	t.Parallel()
	const cyc = "cyc-20261112"
	f := newFixture(t, nil)
	for _, hours := range []string{"four", "-1.5", "1.5h"} {
		bad := charge("ch-bad", "r-1", "p-1", cyc, "3.00")
		bad.Lines = []*eventsv1.ChargeLine{{Kind: "usage", GpuModel: "H100", GpuHours: "1.5"}, {Kind: "usage", GpuModel: "A100", GpuHours: hours}}
		got, err := ports.PostCharges(f.ctx, f.app, []ports.ChargesMessage{batchMsg(t, "batch-bad", bad), batchMsg(t, "batch-ok", charge("ch-ok", "r-2", "p-1", cyc, "2.00"))})
		var poison *natsx.PoisonError
		if !errors.As(err, &poison) || len(poison.ByID) != 1 || poison.ByID["batch-bad"] == nil ||
			!strings.Contains(poison.ByID["batch-bad"].Error(), fmt.Sprintf("line 1: gpu_hours %q", hours)) {
			t.Fatalf("gpu_hours %q: posted %d, %v; want batch-bad named as poison for its line 1", hours, got, err)
		}
	}
	if got := f.count(t, `select count(*) from ledger.transactions where kind = 'charge'`); got != 0 {
		t.Fatalf("%d charge transactions after the poisoned fetches, want 0 (each rolled back)", got)
	}
	good := charge("ch-good", "r-1", "p-1", cyc, "3.00")
	good.Lines = []*eventsv1.ChargeLine{{Kind: "usage", GpuModel: "H100", GpuHours: "1.5"}, {Kind: "usage", GpuModel: "A100", GpuHours: "0.25"}, {Kind: "usage", GpuModel: "A100"}}
	if got, err := ports.PostCharges(f.ctx, f.app, []ports.ChargesMessage{batchMsg(t, "batch-good", good)}); err != nil || got != 1 {
		t.Fatalf("a charge with readable (or no) GPU-hours posted %d, %v; want 1", got, err)
	}
	if md := f.texts(t, `select metadata->>'gpu_hours' from ledger.transactions where idempotency_key = 'ch-good'`); len(md) != 1 || md[0] != "1.75" {
		t.Fatalf("gpu_hours in the metadata: %v, want [1.75]", md)
	}
}

// postedTransactions decodes the outbox's ledger.posted.{class} batches and
// returns the charge idempotency keys they announce (each must appear once).
func postedTransactions(t testing.TB, f *fixture, class string) []string {
	t.Helper()
	rows, err := f.pool.Query(f.ctx, `select payload from ledger.outbox where subject = $1 order by seq`, "ledger.posted."+class)
	if err != nil {
		t.Fatal(err)
	}
	payloads, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	seen := map[string]bool{}
	for _, p := range payloads {
		var b eventsv1.LedgerPostedBatch
		if err := proto.Unmarshal(p, &b); err != nil {
			t.Fatal(err)
		}
		for _, tx := range b.Transactions {
			if seen[tx.TransactionId] {
				t.Fatalf("transaction %s announced twice on ledger.posted.%s", tx.TransactionId, class)
			}
			seen[tx.TransactionId] = true
			if len(tx.Postings) != 2 {
				t.Fatalf("transaction %s announced with %d postings, want 2", tx.TransactionId, len(tx.Postings))
			}
			if strings.HasPrefix(tx.IdempotencyKey, "ch-") {
				keys = append(keys, tx.IdempotencyKey)
			}
		}
	}
	return keys
}

func TestClosedCycleRedirect(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	const closed, next = "cyc-20261112", "cyc-20261227"
	if _, err := ports.PostCharges(f.ctx, f.app, []ports.ChargesMessage{batchMsg(t, "b1", charge("ch-1", "r-1", "p-1", closed, "1.00"))}); err != nil {
		t.Fatal(err)
	}
	at, err := f.app.CloseLedgerCycle(f.ctx, closed)
	if err != nil {
		t.Fatal(err)
	}
	again, err := f.app.CloseLedgerCycle(f.ctx, closed)
	if err != nil || !again.Equal(at) {
		t.Fatalf("closing again: %s, %v; want the original %s", again, err, at)
	}
	if _, err := ports.PostCharges(f.ctx, f.app, []ports.ChargesMessage{batchMsg(t, "b2", charge("ch-2", "r-1", "p-1", closed, "2.00"))}); err != nil {
		t.Fatal(err)
	}
	wantBalance(t, f, "provider:p-1:pending:"+closed, "USD", "1.00")
	wantBalance(t, f, "provider:p-1:pending:"+next, "USD", "2.00")
	bs, _, err := f.app.ListCycleBalances(f.ctx, closed, 0, "")
	if err != nil || len(bs) != 1 || bs[0].ProviderID != "p-1" || !bs[0].Balance.Amount.Equal(dec("1")) {
		t.Fatalf("cycle balances of %s: %+v, %v", closed, bs, err)
	}
	// Two cycles closed in a row: the charge walks to the first open one.
	if _, err := f.app.CloseLedgerCycle(f.ctx, next); err != nil {
		t.Fatal(err)
	}
	if _, err := ports.PostCharges(f.ctx, f.app, []ports.ChargesMessage{batchMsg(t, "b3", charge("ch-3", "r-1", "p-1", closed, "3.00"))}); err != nil {
		t.Fatal(err)
	}
	wantBalance(t, f, "provider:p-1:pending:cyc-20270210", "USD", "3.00")
	tx, _, err := f.app.ListTransactions(f.ctx, "provider:p-1:pending:cyc-20270210", nil, 0, "")
	if err != nil || len(tx) != 1 || tx[0].Metadata["requested_cycle"] != closed {
		t.Fatalf("redirected transaction: %+v, %v", tx, err)
	}
	if _, err := f.app.CloseLedgerCycle(f.ctx, "cyc-20261113"); err == nil {
		t.Fatal("closing a date that is not a cycle start was accepted")
	}
	checkInvariants(t, f)
}

func TestChargesConsumerFromJetStream(t *testing.T) {
	t.Parallel()
	js := testkit.NewJetStream(t)
	f := newFixture(t, js)
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- f.svc.Run(ctx) }()
	const cyc = "cyc-20261112"
	publish := chargesPublisher(t, f, js)
	publish("b-1", charge("c-1", "r-1", "p-1", cyc, "1.25"), charge("c-2", "r-2", "p-1", cyc, "2.00"))
	publish("b-2", charge("c-1", "r-1", "p-1", cyc, "1.25")) // a retry under a new message id
	publish("b-3", charge("c-3", "r-1", "p-1", cyc, "0.75"))
	testkit.Eventually(t, 10*time.Second, func() bool {
		return f.balance(t, "provider:p-1:pending:"+cyc, "USD").Equal(dec("4.00"))
	}, "charges not posted")
	wantBalance(t, f, "renter:r-1:wallet", "USD", "-2.00")
	// The outbox relay publishes depletion to BILLING and postings to LEDGER.
	testkit.Eventually(t, 10*time.Second, func() bool {
		s, err := js.JS.Stream(f.ctx, "BILLING")
		if err != nil {
			return false
		}
		info, err := s.Info(f.ctx)
		return err == nil && info.State.Msgs == 2 // r-1 and r-2 both went below zero
	}, "wallet depletion not published")
	// The chain worker chains every transaction.
	testkit.Eventually(t, 10*time.Second, func() bool {
		return f.count(t, `select count(*) from ledger.journal_chain`) == 3
	}, "transactions not chained")
	checkInvariants(t, f)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// chargesPublisher returns a function that publishes one charges.rated
// batch of cs to js under the message id msgID, as pricing's relay does.
func chargesPublisher(t *testing.T, f *fixture, js *testkit.JetStream) func(msgID string, cs ...*eventsv1.RatedCharge) {
	return func(msgID string, cs ...*eventsv1.RatedCharge) {
		t.Helper()
		b, err := proto.Marshal(&eventsv1.ChargesRatedBatch{BatchId: msgID, Charges: cs})
		if err != nil {
			t.Fatal(err)
		}
		m := nats.NewMsg("charges.rated.p-1")
		m.Data = b
		m.Header.Set(jetstream.MsgIDHeader, msgID)
		if _, err := js.JS.PublishMsg(f.ctx, m); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCopiedJournalRowsMatchInsertedOnes: a batch of charges (batchMin or
// more: one binary COPY) writes the same journal rows and postings as the
// same charges posted one message at a time (each an INSERT … unnest).
func TestCopiedJournalRowsMatchInsertedOnes(t *testing.T) {
	t.Parallel()
	const cyc, n = "cyc-20261112", 100
	var cs []*eventsv1.RatedCharge
	for i := range n {
		c := charge(fmt.Sprintf("ch-%03d", i), fmt.Sprintf("r-%d", i%3), fmt.Sprintf("p-%d", i%4), cyc, fmt.Sprintf("%d.%02d", 1+i, i%100))
		c.Lines = []*eventsv1.ChargeLine{{Kind: "usage", GpuModel: "H100", GpuHours: "1.5"}}
		cs = append(cs, c)
	}
	one, batch := newFixture(t, nil), newFixture(t, nil)
	for i, c := range cs {
		if got, err := ports.PostCharges(one.ctx, one.app, []ports.ChargesMessage{batchMsg(t, fmt.Sprintf("one-%d", i), c)}); err != nil || got != 1 {
			t.Fatalf("charge %d alone posted %d, %v; want 1", i, got, err)
		}
	}
	if got, err := ports.PostCharges(batch.ctx, batch.app, []ports.ChargesMessage{batchMsg(t, "all", cs...)}); err != nil || got != n {
		t.Fatalf("the batch posted %d, %v; want %d", got, err, n)
	}
	rowsOf := func(f *fixture) []string {
		return f.texts(t, `select format('%s|%s|%s|%s|%s|%s|%s', t.idempotency_key, encode(t.request_hash, 'hex'), t.kind,
				t.description, t.effective_at, t.metadata::text,
				(select string_agg(format('%s %s %s %s %s', p.idx, p.account, p.currency, p.direction, p.amount), ';' order by p.idx)
				 from ledger.postings p where p.tx_id = t.id))
			from ledger.transactions t order by t.idempotency_key`)
	}
	a, b := rowsOf(one), rowsOf(batch)
	if len(a) != n || len(b) != n {
		t.Fatalf("%d journal rows posted one by one, %d in a batch; want %d each", len(a), len(b), n)
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("journal row %d differs:\n one by one %s\n   in batch %s", i, a[i], b[i])
		}
	}
	checkInvariants(t, batch)
}

// One fetched batch builds each renter's wallet and each provider's pending
// account of a cycle once (app.chargeParts): charges of one provider in two
// cycles, of two renters interleaved, and one naming no valid cycle (posted
// to the cycle its usage ended in) each land on their own account.
func TestChargesOfOneBatchKeepTheirAccounts(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	const cyc1, cyc2 = "cyc-20261112", "cyc-20261227"
	msgs := []ports.ChargesMessage{
		batchMsg(t, "b-1", charge("ch-a", "r-1", "p-1", cyc1, "1.00"), charge("ch-b", "r-2", "p-1", cyc2, "2.00"), charge("ch-c", "r-1", "p-1", cyc2, "4.00")),
		batchMsg(t, "b-2", charge("ch-d", "r-2", "p-2", "cyc-bogus", "8.00"), charge("ch-e", "r-1", "p-1", cyc1, "16.00")),
	}
	if got, err := ports.PostCharges(f.ctx, f.app, msgs); err != nil || got != 5 {
		t.Fatalf("posted %d, %v; want 5", got, err)
	}
	wantBalance(t, f, "renter:r-1:wallet", "USD", "-21.00")
	wantBalance(t, f, "renter:r-2:wallet", "USD", "-10.00")
	wantBalance(t, f, "provider:p-1:pending:"+cyc1, "USD", "17.00")
	wantBalance(t, f, "provider:p-1:pending:"+cyc2, "USD", "6.00")
	wantBalance(t, f, "provider:p-2:pending:"+cyc1, "USD", "8.00")
	checkInvariants(t, f)
}
