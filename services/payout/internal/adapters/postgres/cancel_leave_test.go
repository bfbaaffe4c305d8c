package postgres

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/services/payout/internal/app"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// leaveAfterCommit is a store whose caller leaves (leave) as soon as an
// update has committed: a client that disconnected right after its
// cancel was stored.
type leaveAfterCommit struct {
	app.Store
	leave context.CancelFunc
}

func (s leaveAfterCommit) Update(ctx context.Context, fn func(app.Tx) error) error {
	err := s.Store.Update(ctx, fn)
	s.leave()
	return err
}

// ctxLedger is keyedLedger that, as the ledger client over gRPC does,
// refuses a call whose context has ended.
type ctxLedger struct {
	*keyedLedger
	mu      sync.Mutex
	refused int
}

func (l *ctxLedger) Transfer(ctx context.Context, t domain.LedgerTransfer) error {
	if err := ctx.Err(); err != nil {
		l.mu.Lock()
		l.refused++
		l.mu.Unlock()
		return err
	}
	return l.keyedLedger.Transfer(ctx, t)
}

// A payout canceled while its bank transfer waited in the queue, its
// caller gone right after the cancel committed: the return to available
// was posted with the caller's context, so the post was canceled with it,
// the amount left in in_transit until the workflow's next rail poll, and
// the cancel answered as failed. The return is posted with a context of
// its own: posted once, recorded as posted, nothing logged as failed.
func TestCanceledInQueueReturnPostedAfterCallerLeft(t *testing.T) {
	pool := migratedPool(t)
	s := &Store{Pool: pool}
	const key = "payout-po-cl-1-canceled"
	led := &ctxLedger{keyedLedger: &keyedLedger{moved: map[string]int{"payout-po-cl-1-submitted": 1},
		balance: map[string]decimal.Decimal{domain.InTransitAccount("p-s"): decimal.NewFromInt(600)}}}
	var logged bytes.Buffer
	ctx, leave := context.WithCancel(context.Background())
	defer leave()
	a := &app.Payouts{Store: leaveAfterCommit{Store: s, leave: leave}, Ledger: led, Clock: clock.System{},
		Log: slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	sentPayout(t, pool, "po-cl", "cyc-20260101", "bank", "queued")

	err := a.Cancel(ctx, "po-cl", "fraud confirmed")
	if ctx.Err() == nil {
		t.Fatal("guard: the caller did not leave")
	}
	var postedAt *string
	if qerr := pool.QueryRow(context.Background(), `select cancel_posted_at::text from payout.payouts where payout_id = 'po-cl'`).Scan(&postedAt); qerr != nil {
		t.Fatal(qerr)
	}
	available, inTransit, moved := led.state("p-s", key)
	if err != nil || available != "600" || inTransit != "0" || moved != 1 || postedAt == nil || led.refused != 0 || logged.Len() != 0 {
		t.Fatalf("cancel committed, its caller gone: %v; available %s, in_transit %s, %s moved money %d times, posted at %v, "+
			"%d ledger calls refused for a canceled context, logged %q; want no error, available 600, in_transit 0, the return "+
			"posted once and recorded, no call refused, nothing logged", err, available, inTransit, key, moved, postedAt, led.refused, logged.String())
	}
}
