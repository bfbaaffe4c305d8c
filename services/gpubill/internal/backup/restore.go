package backup

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/services/ledger"
	"github.com/gpubill/gpubill/services/payout"
)

// xidGapMax bounds how many transaction ids Restore consumes to bring a
// fresh cluster's counter past the snapshot's (~135k per second here); a
// larger gap is refused with the pg_resetwal remedy.
const xidGapMax = 200_000_000

// ErrNotEmpty: restore loads only into an empty database.
var ErrNotEmpty = errors.New("database is not empty")

// Result is what Restore found after loading.
type Result struct {
	Manifest *Manifest // nil after a recovery (AfterRecovery)
	// Database is the database readied (AfterRecovery).
	Database string
	Restored ledger.Figures
	Chain    ledger.VerifyResult
	// XidsAdvanced is how many transaction ids were consumed so the
	// restored journal's ids are in the cluster's past.
	XidsAdvanced uint64
	// Requeued counts, per schema, the published messages put back into
	// its outbox (what JetStream held for a consumer at the snapshot).
	Requeued map[string]int64
	// PayoutsRestarted is how many payouts get a new workflow.
	PayoutsRestarted int64
	// BankFilesHeld: the bank-file rail cuts and delivers no batch until
	// finance releases it (payout.AfterRestore).
	BankFilesHeld bool
	// Epoch is the restore epoch given to the schemas in EpochSchemas
	// (pkg/pg.NewRestoreEpoch): the ids and ETags their services issue
	// from now on differ from any issued before the restore.
	Epoch        string
	EpochSchemas []string
}

// Restore loads the snapshot in dir into the database at dsn (created if
// missing; refused unless empty), then proves it: the ledger's figures and
// every table's row count equal the manifest's, and the hash chain verifies
// up to the manifest's head. Anything else is an error naming the
// difference; the database is then left as loaded, for inspection.
//
// Until its last step (afterRestore) commits, the database carries the
// mark of an unfinished restore (pg.RestorePendingTable), committed before
// the load: no gpubill service starts on it and ledger verify fails, so a
// restore killed part way is never taken for a finished one.
func Restore(ctx context.Context, dsn, dir string, tools Tools) (_ *Result, err error) {
	defer func() {
		if err != nil && ctx.Err() != nil { // SIGINT, SIGTERM, SIGHUP: the error alone read "signal: killed"
			err = fmt.Errorf("restore interrupted: %w", err)
		}
	}()
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	if err := pg.EnsureDatabase(ctx, dsn); err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := checkEmpty(ctx, conn); err != nil {
		return nil, err
	}
	res := &Result{Manifest: m}
	if res.XidsAdvanced, err = advanceXid(ctx, conn, m.Ledger.XidMax); err != nil {
		return nil, err
	}
	// Committed before the load's: pg_restore's commit and afterRestore's
	// are two, and a process killed between them left a loaded database
	// that looked ready.
	if err := pg.MarkRestorePending(ctx, conn); err != nil {
		return nil, err
	}
	// One transaction: a failed restore leaves the database empty (but for
	// the mark, which a restore again keeps).
	if err := tools.runOn(ctx, "pg_restore", dsn, "--single-transaction", "--exit-on-error", "--no-owner", "--no-privileges",
		filepath.Join(dir, DumpDir)); err != nil {
		return nil, fmt.Errorf("%w (nothing was loaded: restore again into this database, or drop it)", err)
	}
	var tables map[string]int64
	if err := pg.InSnapshot(ctx, conn, func(tx pgx.Tx) (err error) {
		if res.Restored, err = ledger.ReadFigures(ctx, tx); err != nil {
			return fmt.Errorf("restored ledger figures: %w", err)
		}
		if tables, err = tableCounts(ctx, tx); err != nil {
			return err
		}
		if res.Chain, err = ledger.VerifyChain(ctx, tx); err != nil {
			return fmt.Errorf("verify restored chain: %w", err)
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("%w (the snapshot is loaded, not verified: %s)", err, loadedRemedy)
	}
	var diffs []string
	diffs = append(diffs, CompareFigures(m.Ledger, res.Restored)...)
	diffs = append(diffs, compareCounts(m.Tables, tables)...)
	if broken := chainBroken(res.Chain); broken != "" {
		diffs = append(diffs, broken)
	} else if res.Chain.HeadHash != m.Ledger.HeadHash {
		diffs = append(diffs, fmt.Sprintf("verified chain head %s, manifest %s", res.Chain.HeadHash, m.Ledger.HeadHash))
	}
	if len(diffs) > 0 {
		return res, fmt.Errorf("restored database differs from the manifest of %s (gpubill does not start on it):\n  %s", dir, strings.Join(diffs, "\n  "))
	}
	if err := afterRestore(ctx, conn, res, restoreRemedy); err != nil {
		return res, err
	}
	return res, nil
}

// chainBroken names what ledger verify found wrong ("": the chain and the
// balances verify).
func chainBroken(c ledger.VerifyResult) string {
	switch {
	case c.OK:
		return ""
	case c.BadBalance != "":
		return "balance " + c.BadBalance + ": " + c.Reason
	case c.BadReportRecord != "":
		return "report record " + c.BadReportRecord + ": " + c.Reason
	case c.FirstBadAuditSeq != 0:
		return fmt.Sprintf("audit log hash chain broken at seq %d: %s", c.FirstBadAuditSeq, c.Reason)
	case c.FirstBadPosition == 0: // outside the chain's links: "position 0" named none
		return fmt.Sprintf("journal broken: transaction %s: %s", c.FirstBadTransaction, c.Reason)
	default:
		return fmt.Sprintf("hash chain broken at position %d (transaction %s): %s", c.FirstBadPosition, c.FirstBadTransaction, c.Reason)
	}
}

// ErrServicesRunning: the step after a restore or a recovery runs only on a
// database no gpubill service runs on (they read the restore epoch once,
// at start).
var ErrServicesRunning = errors.New("gpubill services are running on this database")

// What to do when Restore stopped after the load (loadedRemedy: before
// verifying it), and when afterRestore failed, after a restore and after a
// recovery.
const (
	loadedRemedy = "it is not ready for a new JetStream and Temporal, and gpubill does not start on it: drop it and restore again"
	// The snapshot verified: after-recovery (ledger verify, then the step)
	// readies it as well as a restore again.
	restoreRemedy = "the database holds the verified snapshot but is not ready " +
		"for a new JetStream and Temporal, and gpubill does not start on it: drop it and restore again, " +
		"or, with every gpubill service on it stopped, run gpubill after-recovery --services-stopped"
	recoveryRemedy = "the database is as recovered, not ready for a new JetStream and Temporal; " +
		"stop every gpubill service on it and run gpubill after-recovery again before starting any"
)

// afterRestore readies a verified database for a new JetStream store and a
// new Temporal, in one transaction: each schema's kept published messages go
// back into its outbox, payouts whose workflow had work get one again, the
// bank-file rail is held, and every schema with a restore epoch gets a new one (versions and crossing
// counts restart from the snapshot's: the ids and ETags built from them
// carry the epoch, so none issued before the restore is issued again); the
// mark of an unfinished restore, if any, goes with that commit.
// Step by step, a failure part way left some schemas' messages in
// outbox_published (never sent again: that usage never charged) and payouts
// marked started under a Temporal that never saw them, and a second restore
// was refused (the database not empty). Failed, nothing of it is applied,
// and the error ends with remedy (after a restore: drop the database and
// restore again).
//
// It refuses (ErrServicesRunning) while an outbox relay leads on the
// database (outbox.RelayLockKey): a service running there read the old
// epoch at start and would go on issuing ids and ETags under it. It holds
// those locks to its commit, so no relay starting meanwhile publishes.
func afterRestore(ctx context.Context, conn *pgx.Conn, res *Result, remedy string) (err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w (nothing of this step was applied: %s)", err, remedy)
		}
	}()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	rows, err := tx.Query(ctx, `select schemaname from pg_tables where tablename = 'outbox_published' order by 1`)
	if err != nil {
		return fmt.Errorf("schemas with an outbox: %w", err)
	}
	schemas, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("schemas with an outbox: %w", err)
	}
	var leading []string
	for _, s := range schemas {
		var locked bool
		if err := tx.QueryRow(ctx, `select pg_try_advisory_xact_lock(hashtext($1))`, outbox.RelayLockKey(s)).Scan(&locked); err != nil {
			return fmt.Errorf("outbox relay lock of %s: %w", s, err)
		}
		if !locked {
			leading = append(leading, s)
		}
	}
	if len(leading) > 0 {
		return fmt.Errorf("%w: the outbox relay of %s holds its lock", ErrServicesRunning, strings.Join(leading, ", "))
	}
	requeued := map[string]int64{}
	for _, s := range schemas {
		if requeued[s], err = outbox.RequeuePublished(ctx, tx, s); err != nil {
			return err
		}
	}
	epoch, epochSchemas, err := pg.NewRestoreEpoch(ctx, tx)
	if err != nil {
		return err
	}
	var hasPayout bool
	if err := tx.QueryRow(ctx, `select to_regclass('payout.payouts') is not null`).Scan(&hasPayout); err != nil {
		return err
	}
	var restarted int64
	if hasPayout {
		if restarted, err = payout.AfterRestore(ctx, tx, time.Now()); err != nil {
			return err
		}
	}
	if err := pg.ClearRestorePending(ctx, tx); err != nil {
		return err
	}
	if err := afterRestoreFail(ctx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	res.Requeued, res.PayoutsRestarted, res.Epoch, res.EpochSchemas = requeued, restarted, epoch, epochSchemas
	res.BankFilesHeld = hasPayout
	return nil
}

// afterRestoreFail fails afterRestore before its commit when a test set it.
var afterRestoreFail = func(context.Context) error { return nil }

// checkEmpty refuses a database holding any schema but an empty public (the
// mark of an unfinished restore aside: one left alone there is a restore
// whose load failed).
func checkEmpty(ctx context.Context, conn *pgx.Conn) error {
	rows, err := conn.Query(ctx, `select n.nspname || coalesce(' (' || count(c.oid) || ' relations)', '')
		from pg_namespace n left join pg_class c on c.relnamespace = n.oid and not (n.nspname = 'public' and c.relname = $1)
		where n.nspname not in ('pg_catalog', 'information_schema') and n.nspname not like 'pg\_%'
		group by n.nspname having n.nspname <> 'public' or count(c.oid) > 0 order by 1`, pg.RestorePendingTable)
	if err != nil {
		return fmt.Errorf("check the database is empty: %w", err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("check the database is empty: %w", err)
	}
	if len(found) == 0 {
		return nil
	}
	pending, err := pg.IsRestorePending(ctx, conn)
	if err != nil {
		return err
	}
	if pending {
		return fmt.Errorf("%w: %q holds %s: %w; %s", ErrNotEmpty, conn.Config().Database, strings.Join(found, ", "),
			pg.ErrRestorePending, pg.RestorePendingRemedy)
	}
	return fmt.Errorf("%w: %q holds %s; restore into a new database (point DATABASE_URL at a name that does not exist yet; it is created)",
		ErrNotEmpty, conn.Config().Database, strings.Join(found, ", "))
}

// advanceXid consumes transaction ids until the cluster hands out ones
// above floor. The journal's hash chain orders transactions by the id that
// wrote them and chains one only once every id before it has finished: a
// snapshot from a busier cluster restored into a younger one would
// otherwise give new transactions ids that sort before the restored ones
// (never chained). It returns how many ids it consumed.
func advanceXid(ctx context.Context, conn *pgx.Conn, floor uint64) (uint64, error) {
	var cur uint64
	if err := conn.QueryRow(ctx, `select pg_current_xact_id()::text::numeric::bigint`).Scan(&cur); err != nil {
		return 0, fmt.Errorf("current transaction id: %w", err)
	}
	if cur > floor {
		return 0, nil
	}
	if floor-cur > xidGapMax {
		return 0, xidGapError(floor, cur)
	}
	if _, err := conn.Exec(ctx, `set synchronous_commit = off`); err != nil {
		return 0, err
	}
	// Each loop turn is its own transaction (COMMIT inside DO).
	if _, err := conn.Exec(ctx, fmt.Sprintf(`do $$ begin
		commit;
		while pg_current_xact_id() <= '%d'::xid8 loop commit; end loop;
	end $$`, floor)); err != nil {
		return 0, fmt.Errorf("advance transaction ids past %d: %w", floor, err)
	}
	if _, err := conn.Exec(ctx, `reset synchronous_commit`); err != nil {
		return 0, err
	}
	return floor - cur + 1, nil
}

// xidGapError refuses a cluster too far behind the snapshot's transaction
// ids, with the pg_resetwal that brings it past them.
func xidGapError(floor, cur uint64) error {
	epoch, xid := resetwalNext(floor)
	return fmt.Errorf("the snapshot's journal carries transaction ids up to %d and this cluster is at %d: "+
		"stop it and run pg_resetwal -e %d -x %d on its data directory (the ids past the snapshot's, from a pg_xact segment's start), "+
		"then restore again", floor, cur, epoch, xid)
}

// resetwalNext is the epoch and 32-bit transaction id pg_resetwal takes
// (-e, -x) for the first id past floor (a 64-bit id, epoch and all) that
// starts a pg_xact segment (2^20 ids), as its documentation asks. A 64-bit
// id given to -x alone was cut to its low 32 bits with epoch 0 once the
// source had used 2^32 ids: far below the snapshot's, the restore refused
// again with the same advice.
func resetwalNext(floor uint64) (epoch, xid uint64) {
	const segment = 1 << 20
	next := (floor/segment + 1) * segment
	epoch, xid = next>>32, next&0xffffffff
	if xid == 0 { // ids 0–2 are reserved: the epoch's first segment starts at 0
		xid = segment
	}
	return epoch, xid
}

// CompareFigures lists how got differs from want (nothing: identical).
func CompareFigures(want, got ledger.Figures) []string {
	var d []string
	add := func(what string, w, g any) {
		if fmt.Sprint(w) != fmt.Sprint(g) {
			d = append(d, fmt.Sprintf("%s: manifest %v, restored %v", what, w, g))
		}
	}
	add("journal head hash", want.HeadHash, got.HeadHash)
	add("journal head position", want.HeadPosition, got.HeadPosition)
	add("transactions", want.Transactions, got.Transactions)
	add("postings", want.Postings, got.Postings)
	add("balances digest", want.BalancesSHA256, got.BalancesSHA256)
	// The transaction id counter was advanced past the manifest's: one
	// lowered there (edited, corrupt) left new transactions sorting behind
	// the restored head, never chained.
	add("largest transaction id (xid_max)", want.XidMax, got.XidMax)
	add("currencies", len(want.Currencies), len(got.Currencies))
	for i := range min(len(want.Currencies), len(got.Currencies)) {
		w, g := want.Currencies[i], got.Currencies[i]
		add("currency", w.Currency, g.Currency)
		add(w.Currency+" accounts", w.Accounts, g.Accounts)
		add(w.Currency+" debits", w.Debits.String(), g.Debits.String())
		add(w.Currency+" credits", w.Credits.String(), g.Credits.String())
		add(w.Currency+" bank:client", w.BankClient.String(), g.BankClient.String())
	}
	return d
}

func compareCounts(want, got map[string]int64) []string {
	var names []string
	for n := range want {
		names = append(names, n)
	}
	for n := range got {
		if _, ok := want[n]; !ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	var d []string
	for _, n := range names {
		w, inW := want[n]
		g, inG := got[n]
		switch {
		case !inG:
			d = append(d, fmt.Sprintf("table %s missing (manifest: %d rows)", n, w))
		case !inW:
			d = append(d, fmt.Sprintf("table %s not in the manifest (%d rows)", n, g))
		case w != g:
			d = append(d, fmt.Sprintf("table %s: manifest %d rows, restored %d", n, w, g))
		}
	}
	return d
}
