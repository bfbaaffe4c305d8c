package backup

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/testkit"
)

// The restore's last step (published messages back into each outbox,
// payouts marked for a new workflow, the bank-file rail held, a new
// restore epoch) is one transaction: failed, it leaves the verified
// snapshot as loaded and says to drop the database and restore again. Step by step, a failure after the first schema left the others'
// messages in outbox_published, never sent again, and a second restore was
// refused (the database not empty).
func TestAfterRestoreAllOrNothing(t *testing.T) {
	ctx := testkit.Context(t)
	pool, dsn := testkit.NewPool(t)
	for _, s := range []string{"metering", "pricing", "payout"} {
		if err := pg.Migrate(ctx, pool, s, migrations.For(s)); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{
		`insert into metering.outbox_published (seq, id, subject, payload, created_at, stream, stream_seq) values (1, 'm-1', 'usage.recorded.p-1', 'x', now(), 'USAGE', 1)`,
		`insert into pricing.outbox_published (seq, id, subject, payload, created_at, stream, stream_seq) values (1, 'c-1', 'charges.rated.p-1', 'x', now(), 'CHARGES', 1)`,
		`insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission, tax_withheld, net, status, workflow_started)
			values ('po-1', 'p-1', 'cyc-1', 'CNY', 100, 20, 16, 64, 'created', true)`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	state := func() string {
		var published, queued, started int
		if err := pool.QueryRow(ctx, `select (select count(*) from metering.outbox_published) + (select count(*) from pricing.outbox_published),
			(select count(*) from metering.outbox) + (select count(*) from pricing.outbox),
			(select count(*) from payout.payouts where workflow_started)`).Scan(&published, &queued, &started); err != nil {
			t.Fatal(err)
		}
		var epoch string
		var held int
		if err := pool.QueryRow(ctx, `select epoch, (select count(*) from payout.bank_file_holds where released_at is null) from payout.restore_epoch`).
			Scan(&epoch, &held); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(published, queued, started, held, " ", epoch)
	}
	migrated := state()
	afterRestoreFail = func(context.Context) error { return errors.New("connection lost") }
	res := &Result{}
	err = afterRestore(ctx, conn, res, restoreRemedy)
	afterRestoreFail = func(context.Context) error { return nil }
	if err == nil || !strings.Contains(err.Error(), "drop it and restore again") || res.Requeued != nil {
		t.Fatalf("a failure before the commit: %v, requeued %v; want an error saying to drop and restore again", err, res.Requeued)
	}
	if got := state(); got != migrated || !strings.HasPrefix(got, "2 0 1 0 ") {
		t.Fatalf("after the failed step: published, queued, started, held, epoch = %s; want %s (nothing applied)", got, migrated)
	}
	if err := afterRestore(ctx, conn, res, restoreRemedy); err != nil {
		t.Fatal(err)
	}
	if got := state(); got != "0 2 0 1 "+res.Epoch || res.Epoch == "" || strings.HasSuffix(migrated, " "+res.Epoch) ||
		res.Requeued["metering"] != 1 || res.Requeued["pricing"] != 1 || res.PayoutsRestarted != 1 || fmt.Sprint(res.EpochSchemas) != "[payout]" {
		t.Fatalf("after the step: published, queued, started, held, epoch = %s (migrated: %s), %+v; "+
			"want 0 2 0 1 (the bank-file rail held), one requeued per schema, one payout, a new epoch in payout", got, migrated, res)
	}
}

// pg_resetwal takes the next transaction id as an epoch (-e) and a 32-bit id
// (-x), at a pg_xact segment's start, past the snapshot's highest id.
func TestResetwalNext(t *testing.T) {
	for _, tc := range []struct{ floor, epoch, xid uint64 }{
		{floor: 1000, epoch: 0, xid: 1 << 20},
		{floor: 1<<20 - 1, epoch: 0, xid: 1 << 20},
		{floor: 1 << 20, epoch: 0, xid: 2 << 20},
		{floor: 5_000_000_000, epoch: 1, xid: 5_000_000_000/(1<<20)*(1<<20) + 1<<20 - 1<<32},
		{floor: 1<<32 - 1, epoch: 1, xid: 1 << 20}, // the next epoch's first segment starts at id 0, reserved
	} {
		epoch, xid := resetwalNext(tc.floor)
		next := epoch<<32 | xid
		if epoch != tc.epoch || xid != tc.xid || next <= tc.floor || xid%(1<<20) != 0 {
			t.Errorf("floor %d: -e %d -x %d; want -e %d -x %d, past the floor at a segment's start", tc.floor, epoch, xid, tc.epoch, tc.xid)
		}
	}
	if err := xidGapError(5_000_000_000, 1000); !strings.Contains(err.Error(), "pg_resetwal -e 1 -x 705691648 ") {
		t.Errorf("the refusal of a cluster 5e9 ids behind: %v; want pg_resetwal -e 1 -x 705691648", err)
	}
}
