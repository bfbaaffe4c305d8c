package ledger_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/services/ledger/internal/adapters/postgres"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// A bad debt write-off is of a closed renter's debt: r-wo, credit limit
// 500, was stopped at -500.00; a write-off of the 500.00 while the ledger
// saw it open (not closed yet, or closed in metering with party.updated
// not arrived) brought the wallet to 0 with 500 to spend again, and lease
// control's sweep resumed its GPUs: 500.00 more of debt. Refused until the
// ledger knows the renter closed; then taken, and the sweep leaves the
// wallet stopped.
func TestWriteOffOfAnOpenRenterRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	cyc := f.app.Calendar.At(time.Now()).ID
	if _, err := f.pool.Exec(f.ctx, `insert into ledger.renters (renter_id, currency, credit_limit, version, updated_at, closed_at)
		values ('r-wo', 'CNY', 500, 1, now(), null)`); err != nil {
		t.Fatal(err)
	}
	if _, err := f.app.CreateTransaction(f.ctx, transfer("r-wo-usage", "renter:r-wo:wallet", domain.ProviderPendingAddr("p-1", cyc), "500.00", "CNY")); err != nil {
		t.Fatal(err)
	}
	lc := &app.LeaseControl{Clock: clock.System{}, Log: slog.New(slog.DiscardHandler),
		Wallets: &postgres.Wallets{Pool: f.pool}, Store: postgres.LeaseStore{Pool: f.pool}}
	key := domain.WalletKey{RenterID: "r-wo", Currency: "CNY"}
	if err := lc.Store.WithLeaseTx(f.ctx, func(tx app.LeaseControlTx) error { return lc.Evaluate(f.ctx, tx, []domain.WalletKey{key}) }); err != nil {
		t.Fatal(err)
	}
	state := func() string {
		return f.texts(t, `select state from ledger.lease_control where renter_id = 'r-wo' and currency = 'CNY'`)[0]
	}
	if s := state(); s != "stopped" {
		t.Fatalf("r-wo at -500.00 with a limit of 500: %q, want stopped", s)
	}
	writeOff := func(key, renter string) app.CreateTransactionInput {
		in := transfer(key, domain.PlatformBadDebt, "renter:"+renter+":wallet", "500.00", "CNY")
		in.Metadata = map[string]string{"kind": domain.KindBadDebtWriteOff, "reason": renter + " left owing 500.00"}
		return in
	}

	// Open, and unknown to the ledger (its party.updated not yet arrived).
	_, err := f.app.CreateTransaction(f.ctx, writeOff("wo-open", "r-wo"))
	wantInvalid(t, err, "renter r-wo is not closed")
	wantInvalid(t, err, "close the renter first")
	_, err = f.app.CreateTransaction(f.ctx, writeOff("wo-unknown", "r-unknown"))
	wantInvalid(t, err, "renter r-unknown is not closed")
	wantBalance(t, f, "renter:r-wo:wallet", "CNY", "-500.00")
	wantBalance(t, f, domain.PlatformBadDebt, "CNY", "0")
	if err := lc.Sweep(f.ctx); err != nil {
		t.Fatal(err)
	}
	if s := state(); s != "stopped" {
		t.Fatalf("r-wo after a refused write-off and a sweep: %q, want stopped", s)
	}

	if _, err := f.pool.Exec(f.ctx, `update ledger.renters set closed_at = now() - interval '1 minute', version = 2 where renter_id = 'r-wo'`); err != nil {
		t.Fatal(err)
	}
	wo, err := f.app.CreateTransaction(f.ctx, writeOff("wo-closed", "r-wo"))
	if err != nil {
		t.Fatalf("write-off of closed r-wo: %v", err)
	}
	if wo.Kind != domain.TxBadDebtWriteOff {
		t.Fatalf("write-off posted as %q", wo.Kind)
	}
	wantBalance(t, f, "renter:r-wo:wallet", "CNY", "0")
	wantBalance(t, f, domain.PlatformBadDebt, "CNY", "500.00")
	if err := lc.Sweep(f.ctx); err != nil {
		t.Fatal(err)
	}
	if s := state(); s != "stopped" {
		t.Fatalf("closed r-wo written off to 0, after a sweep: %q, want stopped", s)
	}
	// The same write-off asked again answers the one posted.
	again, err := f.app.CreateTransaction(f.ctx, writeOff("wo-closed", "r-wo"))
	if err != nil || again.ID != wo.ID {
		t.Fatalf("write-off replayed: %v, %v; want %s", again, err, wo.ID)
	}
	// A write-off posted before this check, of a renter the ledger saw
	// open, asked again: the replay answers it, it is not refused.
	if _, err := f.pool.Exec(f.ctx, `update ledger.renters set closed_at = null where renter_id = 'r-wo'`); err != nil {
		t.Fatal(err)
	}
	again, err = f.app.CreateTransaction(f.ctx, writeOff("wo-closed", "r-wo"))
	if err != nil || again.ID != wo.ID {
		t.Fatalf("write-off posted before the check, replayed with the renter open: %v, %v; want %s", again, err, wo.ID)
	}
}
