package ledger_test

import (
	"context"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// A restore restarts lease control's crossing counts from the snapshot's.
// A renter stopped after the snapshot (crossing 1, 5.00 owed) and stopped
// again after the restore (crossing 1 again, 7.00 owed) got one event id
// for both stops: the marketplace scheduler applies each id once, so the
// second stop was never applied and the renter's GPUs ran on. The epoch a
// restore gives the schema (pg.NewRestoreEpoch, gpubill restore's last
// step) makes the second id another.
func TestLeaseEventIDsAfterARestoreAreNew(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t)
	src := testkit.NewDatabase(t)
	open := func(dsn string) *fixture {
		t.Helper()
		pool, err := pg.Open(ctx, dsn, 4)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		return newFixtureOn(t, pool, nil, clock.System{})
	}
	// The snapshot: the migrated, empty ledger, copied before anything moved.
	open(src).pool.Close()
	dst := copyDatabase(t, src)
	// Restored: the copy gets its epoch before the service starts on it.
	conn, err := pgx.Connect(ctx, dst)
	if err != nil {
		t.Fatal(err)
	}
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		_, _, err := pg.NewRestoreEpoch(ctx, tx)
		return err
	})
	if cerr := conn.Close(ctx); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	before, after := open(src), open(dst)

	stop := func(f *fixture, owed string) (id string) {
		t.Helper()
		if _, err := f.app.CreateTransaction(f.ctx, transfer("use-"+owed, "renter:r-e:wallet", "provider:p-1:pending:cyc-20261112", owed, "CNY")); err != nil {
			t.Fatal(err)
		}
		wallet := []domain.WalletKey{{RenterID: "r-e", Currency: "CNY"}}
		if err := f.svc.LeaseControl().EvaluateMoved(f.ctx, []app.WalletsMoved{{ID: "m-" + owed, Wallets: wallet}}); err != nil {
			t.Fatal(err)
		}
		var crossings int64
		if err := f.pool.QueryRow(f.ctx, `select (select crossings from ledger.lease_control where renter_id = 'r-e'),
			(select id from ledger.outbox where subject = 'lease.stop.requested.r-e')`).Scan(&crossings, &id); err != nil {
			t.Fatal(err)
		}
		if crossings != 1 {
			t.Fatalf("%d crossings after owing %s; the test needs the first crossing on both sides of the restore", crossings, owed)
		}
		return id
	}
	if a, b := stop(before, "5.00"), stop(after, "7.00"); a == b {
		t.Errorf("the stop after the restore (7.00 owed) has the id of the stop before it (5.00 owed): %s; "+
			"a scheduler applying each id once never stops the renter again", a)
	}
}

// copyDatabase copies the database at dsn (no connection may be open on
// it) into a new one, dropped when the test ends, and returns its DSN.
func copyDatabase(t *testing.T, dsn string) string {
	t.Helper()
	ctx := context.Background()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(ctx, testkit.BaseDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	name := pgx.Identifier{u.Path[1:] + "_copy"}.Sanitize()
	if _, err := admin.Exec(ctx, "create database "+name+" template "+pgx.Identifier{u.Path[1:]}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), testkit.BaseDSN())
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), "drop database if exists "+name+" with (force)"); err != nil {
			t.Logf("test database %s left behind: %v", name, err)
		}
	})
	u.Path += "_copy"
	return u.String()
}
