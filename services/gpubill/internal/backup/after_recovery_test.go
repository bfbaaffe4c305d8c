package backup_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/gpubill/internal/cli"
)

// recoveredDatabase is a database as CloudNativePG's point-in-time
// recovery leaves it (no gpubill restore ran): the ledger, metering,
// pricing and payout schemas, with published messages kept in metering's
// and pricing's outbox_published (JetStream held them for a consumer at the
// recovery point) and payout po-1 waiting at the gate with its workflow
// started (on a Temporal that is not the recovered database's).
func recoveredDatabase(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	ctx := testkit.Context(t)
	pool, dsn := testkit.NewPool(t)
	for _, s := range []string{"ledger", "metering", "pricing", "payout"} {
		if err := pg.Migrate(ctx, pool, s, migrations.For(s)); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{
		`insert into metering.outbox_published (seq, id, subject, payload, created_at, stream, stream_seq) values
			(1, 'm-1', 'usage.recorded.p-1', 'x', now(), 'USAGE', 1), (2, 'm-2', 'usage.recorded.p-1', 'y', now(), 'USAGE', 2)`,
		`insert into pricing.outbox_published (seq, id, subject, payload, created_at, stream, stream_seq) values (1, 'c-1', 'charges.rated.p-1', 'x', now(), 'CHARGES', 1)`,
		`insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission, tax_withheld, net, status, workflow_started)
			values ('po-1', 'p-1', 'cyc-1', 'CNY', 100, 20, 16, 64, 'created', true)`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return pool, dsn
}

// recoveredState is what the step changes: the ids in the outboxes, those
// kept as published, the payouts whose workflow counts as started, and the
// restore epochs of the ledger and payout schemas.
func recoveredState(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var s string
	if err := pool.QueryRow(context.Background(), `select concat_ws(' | ',
		'outbox ' || (select coalesce(string_agg(id, ',' order by id), '') from (select id from metering.outbox union all select id from pricing.outbox) o),
		'published ' || (select coalesce(string_agg(id, ',' order by id), '') from (select id from metering.outbox_published union all select id from pricing.outbox_published) p),
		'started ' || (select coalesce(string_agg(payout_id, ',' order by payout_id), '') from payout.payouts where workflow_started),
		'epochs ' || (select epoch from ledger.restore_epoch) || ',' || (select epoch from payout.restore_epoch))`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

func afterRecovery(ctx context.Context, dsn string, args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = cli.Main(ctx, append([]string{"after-recovery", "--database-url", dsn}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestAfterRecoveryReadiesARecoveredDatabase: a database recovered by other
// means than gpubill restore (CloudNativePG's point-in-time recovery, a
// volume snapshot, a pg_basebackup) never ran restore's last step, and no
// command ran it alone: the charges published but not applied at the
// recovery point were never sent again and the unfinished payouts never
// restarted on a new Temporal. `gpubill after-recovery --services-stopped`
// runs that step (the same transaction as restore's) after ledger verify's
// checks: the kept messages are back in their outboxes, po-1 is marked for
// a new workflow, both schemas have one new epoch. Without
// --services-stopped, while a service's outbox relay holds its lock, it
// changes nothing; run twice, the second run moves nothing more.
func TestAfterRecoveryReadiesARecoveredDatabase(t *testing.T) {
	ctx := testkit.Context(t)
	pool, dsn := recoveredDatabase(t)
	recovered := recoveredState(t, pool)
	if !strings.HasPrefix(recovered, "outbox  | published c-1,m-1,m-2 | started po-1 | epochs ") {
		t.Fatalf("the recovered database: %s; want three published messages and po-1 started", recovered)
	}

	code, out, errOut := afterRecovery(ctx, dsn)
	if code != 2 || !strings.Contains(errOut, "--services-stopped") || recoveredState(t, pool) != recovered {
		t.Fatalf("after-recovery without --services-stopped: exit %d, %q %q, state %s; want 2 naming the flag and nothing changed",
			code, out, errOut, recoveredState(t, pool))
	}

	// pricing's outbox relay leads (a pricing service runs on the database).
	relay, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close(context.Background())
	if _, err := relay.Exec(ctx, `select pg_advisory_lock(hashtext('gpubill.outbox.pricing'))`); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = afterRecovery(ctx, dsn, "--services-stopped")
	if code != 1 || !strings.Contains(errOut, "services are running") || !strings.Contains(errOut, "pricing") || recoveredState(t, pool) != recovered {
		t.Fatalf("after-recovery while pricing's relay holds its lock: exit %d, %q %q, state %s; want 1 naming pricing and nothing changed",
			code, out, errOut, recoveredState(t, pool))
	}
	if _, err := relay.Exec(ctx, `select pg_advisory_unlock(hashtext('gpubill.outbox.pricing'))`); err != nil {
		t.Fatal(err)
	}

	code, out, errOut = afterRecovery(ctx, dsn, "--services-stopped")
	got := recoveredState(t, pool)
	var ledgerEpoch, payoutEpoch string
	if _, err := fmt.Sscanf(got[strings.LastIndex(got, "epochs ")+len("epochs "):], "%16s,%16s", &ledgerEpoch, &payoutEpoch); err != nil {
		t.Fatalf("epochs in %q: %v", got, err)
	}
	if code != 0 || !strings.HasPrefix(got, "outbox c-1,m-1,m-2 | published  | started  | epochs ") ||
		ledgerEpoch != payoutEpoch || strings.Contains(recovered, ledgerEpoch) {
		t.Fatalf("after-recovery --services-stopped: exit %d, %q %q, state %s (recovered: %s); "+
			"want 0, the three messages back in their outboxes, po-1 not started, one new epoch in both schemas",
			code, out, errOut, got, recovered)
	}
	for _, want := range []string{"no manifest", "ledger verify: ok", "3 published messages back in their outboxes, 1 payouts to restart",
		"restore epoch " + ledgerEpoch + " (ledger, payout)", "bank-file rail held"} {
		if !strings.Contains(out, want) {
			t.Errorf("after-recovery said %q; want %q", out, want)
		}
	}

	// Again: nothing more is queued or marked (the outbox rows keep their
	// ids; consumers' inboxes skip what they applied).
	code, out, errOut = afterRecovery(ctx, dsn, "--services-stopped")
	if again := recoveredState(t, pool); code != 0 || !strings.HasPrefix(again, "outbox c-1,m-1,m-2 | published  | started  | epochs ") ||
		!strings.Contains(out, "0 published messages back in their outboxes, 0 payouts to restart") {
		t.Fatalf("after-recovery run twice: exit %d, %q %q, state %s; want 0 and nothing more queued or marked", code, out, errOut, again)
	}
}

// TestAfterRecoveryRefusesABrokenLedger: after-recovery runs restore's
// ledger verify first and changes nothing on a chain that does not verify,
// nor on a cluster whose transaction ids are behind the journal's (a
// logical dump loaded into another cluster: gpubill restore advances them).
func TestAfterRecoveryRefusesABrokenLedger(t *testing.T) {
	ctx := testkit.Context(t)
	for _, tc := range []struct {
		name, tamper, want string
	}{
		{name: "a link whose transaction is not in the journal",
			tamper: `insert into ledger.journal_chain (position, tx_id, xid, prev_hash, hash) values (1, gen_random_uuid(), '1', '\x00', '\x00')`,
			want:   "hash chain broken at position 1"},
		{name: "a journal written by transaction ids this cluster has not reached",
			tamper: `insert into ledger.transactions (id, idempotency_key, request_hash, kind, effective_at, created_at, xid)
				values (gen_random_uuid(), 'd1', '\x00', 'manual', now(), now(), '900000000000')`,
			want: "transaction ids up to 900000000000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool, dsn := recoveredDatabase(t)
			if _, err := pool.Exec(ctx, tc.tamper); err != nil {
				t.Fatal(err)
			}
			recovered := recoveredState(t, pool)
			code, out, errOut := afterRecovery(ctx, dsn, "--services-stopped")
			if code != 1 || !strings.Contains(errOut, tc.want) || recoveredState(t, pool) != recovered {
				t.Fatalf("after-recovery: exit %d, %q %q, state %s (before: %s); want 1, %q and nothing changed",
					code, out, errOut, recoveredState(t, pool), recovered, tc.want)
			}
		})
	}
}
