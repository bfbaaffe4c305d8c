package postgres

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// Reports reads what the segregated-funds report needs (app.ReportStore)
// and keeps the balance checkpoints.
type Reports struct {
	Pool *pgxpool.Pool
	// Now is the journal writer's clock (postings' created_at), to pick
	// the nearest base of as-of balances; nil: the system clock.
	Now func() time.Time
	// WaitMax bounds how long a checkpoint waits for the writers open
	// when it is fenced off (tests shorten it); 0: checkpointWaitMax.
	WaitMax time.Duration
}

// LatestCheckpoint returns the latest checkpoint at or before asOf (nil:
// the latest of all), or nil when there is none.
func (r *Reports) LatestCheckpoint(ctx context.Context, asOf *time.Time) (*domain.Checkpoint, error) {
	var c domain.Checkpoint
	err := r.Pool.QueryRow(ctx, `select at, prev_at, postings from ledger.balance_checkpoints
		where $1::timestamptz is null or at <= $1 order by at desc limit 1`, asOf).Scan(&c.At, &c.PrevAt, &c.Postings)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("latest checkpoint: %w", err)
	}
	c.At = c.At.UTC()
	return &c, nil
}

// HeadAsOf returns the hash (hex) and position of the journal chain's head
// as of an instant: the last link chained at or before it (nil: the head).
func (r *Reports) HeadAsOf(ctx context.Context, asOf *time.Time) (string, int64, error) {
	if asOf == nil {
		return ChainHead(ctx, r.Pool)
	}
	var h []byte
	var pos int64
	err := r.Pool.QueryRow(ctx, `select hash, position from ledger.journal_chain where chained_at <= $1
		order by chained_at desc, position desc limit 1`, *asOf).Scan(&h, &pos)
	if errors.Is(err, pgx.ErrNoRows) {
		return hex.EncodeToString(domain.GenesisHash), 0, nil
	}
	if err != nil {
		return "", 0, fmt.Errorf("chain head as of %s: %w", asOf, err)
	}
	return hex.EncodeToString(h), pos, nil
}

// breachesMax bounds the breaches one report lists: past it the report
// says how many more there are rather than growing without limit.
const breachesMax = 10_000

// Breaches returns the breaches in currency posted at or before asOf (nil:
// all), oldest first, at most breachesMax, and how many there are in all.
func (r *Reports) Breaches(ctx context.Context, currency string, asOf *time.Time) ([]domain.RecordedBreach, int, error) {
	rows, err := r.Pool.Query(ctx, `select tx_id::text, account, currency, from_pool, to_pool, amount::text, reason, effective_at, created_at,
			count(*) over ()
		from ledger.segregation_breaches where currency = $1 and ($2::timestamptz is null or created_at <= $2)
		order by created_at, tx_id, seq limit $3`, currency, asOf, breachesMax)
	if err != nil {
		return nil, 0, fmt.Errorf("breaches: %w", err)
	}
	defer rows.Close()
	var out []domain.RecordedBreach
	total := 0
	for rows.Next() {
		var b domain.RecordedBreach
		var from, to, amt string
		if err := rows.Scan(&b.TransactionID, &b.Account, &b.Currency, &from, &to, &amt, &b.Reason, &b.EffectiveAt, &b.CreatedAt, &total); err != nil {
			return nil, 0, err
		}
		b.FromPool, b.ToPool = domain.Pool(from), domain.Pool(to)
		if b.Amount, err = decimal.NewFromString(amt); err != nil {
			return nil, 0, err
		}
		b.EffectiveAt, b.CreatedAt = b.EffectiveAt.UTC(), b.CreatedAt.UTC()
		out = append(out, b)
	}
	return out, total, rows.Err()
}

// HouseFundingNet returns the house-pool debits - credits in currency of
// the client money funding and bad debt write-offs, and of their
// reversals, posted at or before asOf (nil: all) that recorded no breach
// (app.ReportStore). The reversals are found through the entries they
// reverse (the partial index), by their links.
func (r *Reports) HouseFundingNet(ctx context.Context, currency string, asOf *time.Time) (decimal.Decimal, error) {
	var net string
	err := r.Pool.QueryRow(ctx, `with funding as (
			select t.id, t.created_at from ledger.transactions t
			where t.kind in ('client_money_funding', 'bad_debt_write_off') -- literal: the partial index's predicate
		), moved as (
			select id, created_at from funding
			union all
			select t.id, t.created_at from funding f join ledger.reversals l on l.original_id = f.id
				join ledger.transactions t on t.id = l.reversal_id
		)
		select coalesce(sum(case p.direction when 'debit' then p.amount else -p.amount end), 0)::text
		from moved t join ledger.postings p on p.tx_id = t.id
		where ($2::timestamptz is null or t.created_at <= $2)
			and p.currency = $1 and (p.account = $3 or p.account like 'platform:%')
			and not exists (select 1 from ledger.segregation_breaches b where b.tx_id = t.id)`,
		currency, asOf, domain.BankOperating).Scan(&net)
	if err != nil {
		return decimal.Zero, fmt.Errorf("house funding: %w", err)
	}
	d, err := decimal.NewFromString(net)
	if err != nil {
		return decimal.Zero, fmt.Errorf("house funding %q: %w", net, err)
	}
	return d, nil
}

// BreachTotals returns the breaches in currency posted at or before asOf
// (nil: all) summed per house-pool account and direction (few rows,
// however many breaches): what the report takes out of the house pool's
// balance to leave settlement's own movements.
func (r *Reports) BreachTotals(ctx context.Context, currency string, asOf *time.Time) ([]domain.Breach, error) {
	rows, err := r.Pool.Query(ctx, `select account, from_pool, to_pool, sum(amount)::text from ledger.segregation_breaches
		where currency = $1 and ($2::timestamptz is null or created_at <= $2) group by account, from_pool, to_pool`, currency, asOf)
	if err != nil {
		return nil, fmt.Errorf("breach totals: %w", err)
	}
	defer rows.Close()
	var out []domain.Breach
	for rows.Next() {
		b := domain.Breach{Currency: currency}
		var from, to, amt string
		if err := rows.Scan(&b.Account, &from, &to, &amt); err != nil {
			return nil, fmt.Errorf("breach totals: %w", err)
		}
		b.FromPool, b.ToPool = domain.Pool(from), domain.Pool(to)
		if b.Amount, err = decimal.NewFromString(amt); err != nil {
			return nil, fmt.Errorf("breach total of %s: %w", b.Account, err)
		}
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("breach totals: %w", err)
	}
	return out, nil
}

// insertBreaches records the breaches among freshly posted transactions
// (inside the posting transaction).
func insertBreaches(ctx context.Context, tx pgx.Tx, txs []*domain.Transaction) error {
	var rows [][]any
	for _, t := range txs {
		bs := domain.SegregationBreaches(t)
		if len(bs) == 0 {
			continue
		}
		id, err := uuid.Parse(t.ID)
		if err != nil {
			return fmt.Errorf("transaction id %q: %w", t.ID, err)
		}
		for i, b := range bs {
			rows = append(rows, []any{pgtype.UUID{Bytes: id, Valid: true}, int32(i), b.Account, b.Currency, string(b.FromPool), string(b.ToPool),
				numeric(b.Amount), b.Reason, t.EffectiveAt, t.CreatedAt})
		}
	}
	if len(rows) == 0 {
		return nil
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{Schema, "segregation_breaches"},
		[]string{"tx_id", "seq", "account", "currency", "from_pool", "to_pool", "amount", "reason", "effective_at", "created_at"},
		pgx.CopyFromRows(rows)); err != nil {
		return fmt.Errorf("record segregation breaches: %w", err)
	}
	return nil
}

// backfillPage is how many transactions the one-time breach backfill loads at once.
const backfillPage = 1000

// The backfills of recorded breaches: of the transactions posted before
// breaches were recorded when posted (migration 0008), and again of every
// transaction once breaches are classified by kind (migration 0019: a
// finance entry of a sanctioned shape, recorded as none before, is one).
const (
	backfillBreaches       = "segregation_breaches"
	backfillBreachesByKind = "segregation_breaches_by_kind"
)

// BackfillBreaches classifies, once, the transactions posted before breaches
// were recorded when posted, or under the rule by shape: only transactions
// touching a house account can cross pools. The rule by kind names a breach
// wherever the rule by shape did, so a transaction with breaches recorded
// keeps them. Idempotent (rows are keyed by transaction and position).
func (r *Reports) BackfillBreaches(ctx context.Context) error {
	var pending int
	err := r.Pool.QueryRow(ctx, `select count(*) from ledger.report_backfills where name = any($1) and done_at is null`,
		[]string{backfillBreaches, backfillBreachesByKind}).Scan(&pending)
	if err != nil {
		return fmt.Errorf("breach backfill state: %w", err)
	}
	if pending == 0 {
		return nil
	}
	rows, err := r.Pool.Query(ctx, `select distinct tx_id::text from ledger.postings
		where account = any($1::text[])`, []string{domain.BankOperating, domain.PlatformCommission})
	if err != nil {
		return fmt.Errorf("breach backfill: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("breach backfill: %w", err)
	}
	for start := 0; start < len(ids); start += backfillPage {
		txs, err := LoadTransactions(ctx, r.Pool, ids[start:min(start+backfillPage, len(ids))])
		if err != nil {
			return err
		}
		if err := pg.InTx(ctx, r.Pool, func(tx pgx.Tx) error {
			// One replica's page at a time: two starting together both
			// found a transaction with no breach recorded, and the second's
			// COPY failed on the key, that replica's start with it.
			if _, err := tx.Exec(ctx, `select pg_advisory_xact_lock(hashtext('gpubill.ledger.breach_backfill'))`); err != nil {
				return err
			}
			pageIDs := make([]string, len(txs))
			for i, t := range txs {
				pageIDs[i] = t.ID
			}
			rows, err := tx.Query(ctx, `select distinct tx_id::text from ledger.segregation_breaches where tx_id = any($1::uuid[])`, pageIDs)
			if err != nil {
				return err
			}
			recorded, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return err
			}
			var fresh []*domain.Transaction
			for _, t := range txs {
				if !slices.Contains(recorded, t.ID) {
					fresh = append(fresh, t)
				}
			}
			return insertBreaches(ctx, tx, fresh)
		}); err != nil {
			return err
		}
	}
	_, err = r.Pool.Exec(ctx, `update ledger.report_backfills set done_at = now() where name = any($1) and done_at is null`,
		[]string{backfillBreaches, backfillBreachesByKind})
	return err
}

// PostingsSince counts the postings created in (after, upTo], stopping at
// limit (nil after: from the start).
func (r *Reports) PostingsSince(ctx context.Context, after *time.Time, upTo time.Time, limit int64) (int64, error) {
	var n int64
	err := r.Pool.QueryRow(ctx, `select count(*) from (select 1 from ledger.postings
		where created_at > $1 and created_at <= $2 limit $3) x`, since(after), upTo, limit).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count postings: %w", err)
	}
	return n, nil
}

// since is the lower bound of an interval of postings, -infinity for none.
// The statements that read an interval of the journal take both bounds,
// never "$1 is null or created_at > $1": Postgres plans a prepared
// statement afresh for its first five runs and then keeps a generic plan
// when that looks cheaper, and the generic plan of that form bounds the
// BRIN scan by the upper bound only, reading every posting before it. The
// checkpoint step runs every minute and a pool's connection lives up to an
// hour (pgxpool's default lifetime), room for sixty runs: from a
// connection's sixth, the step would read the whole journal every minute.
func since(after *time.Time) pgtype.Timestamptz {
	if after == nil {
		return pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	}
	return pgtype.Timestamptz{Time: *after, Valid: true}
}

// checkpointCopyRows bounds the balance rows one statement of a checkpoint
// writes: each batch is its own short transaction, because a transaction
// holding an xid holds back the hash chain (ChainStep waits for every older
// xid to end) and a checkpoint is hundreds of thousands of rows.
const checkpointCopyRows = 20_000

// Waiting for the writers open when a checkpoint is fenced off: polled
// every checkpointWaitPoll, for at most checkpointWaitMax (a writer still
// open then, a charge batch of minutes, puts the checkpoint off to a later
// step rather than holding the checkpointer).
const (
	checkpointWaitPoll = 50 * time.Millisecond
	checkpointWaitMax  = 20 * time.Second
)

// openWritersSQL counts the transactions that the snapshot $1 saw in
// progress, that still are, and whose session holds ledger.postings open
// for writing (RowExclusiveLock, taken when an INSERT or COPY into it
// starts and held to the end of the transaction), or that are prepared in
// this database. Every service keeps its schema in the one database, so a
// transaction of payout or settlement, or a session idle in one, is no
// ledger writer to wait for. Only a writer whose trigger read the horizon
// before it was raised can have postings the mark misses, and such a
// writer had begun its insert, so holds the lock; one that has not begun
// it reads the raised horizon when it does. A ROLLBACK TO SAVEPOINT (as
// CopyUnlessRepeated's) drops the lock with the rows and their mark.
const openWritersSQL = `select count(*) from pg_snapshot_xip($1::text::pg_snapshot) x
	where pg_xact_status(x) = 'in progress' and (
		exists (select 1 from pg_locks l join pg_locks w on w.pid = l.pid
			where l.locktype = 'transactionid' and l.transactionid = xid(x) and l.mode = 'ExclusiveLock' and l.granted
				and w.locktype = 'relation' and w.relation = 'ledger.postings'::regclass and w.mode = 'RowExclusiveLock'
				and w.database = (select oid from pg_database where datname = current_database()))
		or exists (select 1 from pg_prepared_xacts p where p.transaction = xid(x) and p.database = current_database()))`

// MakeCheckpoint writes the checkpoint at `at` from the latest one before it
// plus the postings created since, and reports whether it did. A posting's
// created_at is its writer's clock, and the write may commit long after,
// so first the horizon is raised to `at`: a writer that inserts postings
// created at or before it from then on marks them late (migration 0040's
// trigger) and the checkpoint is rebuilt at a later step; then every writer
// open when the horizon was raised (it may have looked before) is waited
// for. Once they have ended, the postings up to `at` are summed: every one
// committed by then is in the sums, every later one is marked late. Not made:
// (false, nil) when another checkpointer holds the lock; (false,
// *domain.CheckpointDeferred) when a writer stays open past the wait (put
// off, not failed: a later step makes it). The sums are read without a write
// transaction and written in batches; the header row, written last, makes
// the checkpoint visible (readers start from it).
func (r *Reports) MakeCheckpoint(ctx context.Context, at time.Time) (bool, error) {
	made := false
	err := r.withCheckpointLock(ctx, func(conn *pgxpool.Conn) error {
		if _, err := rebuildLate(ctx, conn); err != nil {
			return err
		}
		if _, err := conn.Exec(ctx, `insert into ledger.checkpoint_horizon (at) values ($1)
			on conflict (one) do update set at = greatest(ledger.checkpoint_horizon.at, excluded.at)`, at); err != nil {
			return fmt.Errorf("checkpoint horizon: %w", err)
		}
		open, err := waitForOpenWriters(ctx, conn, r.waitMax())
		if err != nil {
			return err
		}
		if open > 0 {
			return &domain.CheckpointDeferred{At: at, OpenWriters: open, Waited: r.waitMax()}
		}
		var prev *time.Time
		err = conn.QueryRow(ctx, `select max(at) from ledger.balance_checkpoints where at < $1`, at).Scan(&prev)
		if err != nil {
			return fmt.Errorf("previous checkpoint: %w", err)
		}
		if err := dropCheckpoints(ctx, conn, at); err != nil {
			return err
		}
		if err := buildCheckpoint(ctx, conn, prev, at); err != nil {
			return err
		}
		made = true
		return nil
	})
	return made, err
}

// RebuildLateCheckpoints rebuilds the checkpoints that postings committed
// late made stale and returns how many it rebuilt.
func (r *Reports) RebuildLateCheckpoints(ctx context.Context) (int, error) {
	n := 0
	err := r.withCheckpointLock(ctx, func(conn *pgxpool.Conn) (err error) {
		n, err = rebuildLate(ctx, conn)
		return err
	})
	return n, err
}

// MarkStale records a mark as the late-posting trigger does, for the
// checkpoints at or after since (one made stale with no trigger to mark
// it): reports and verify leave them out from the mark's commit on, and the
// next checkpoint step rebuilds them from the checkpoint before since.
// Returns how many checkpoints are at or after since.
func MarkStale(ctx context.Context, q Querier, since time.Time) (int, error) {
	var n int
	err := q.QueryRow(ctx, `with m as (insert into ledger.checkpoint_late (since) values ($1) returning since)
		select count(*) from ledger.balance_checkpoints c, m where c.at >= m.since`, since).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("mark the checkpoints from %s stale: %w", since.UTC().Format(time.RFC3339Nano), err)
	}
	return n, nil
}

// withCheckpointLock runs fn on a connection holding the checkpointers'
// session advisory lock: one at a time; another gets nothing done.
func (r *Reports) withCheckpointLock(ctx context.Context, fn func(*pgxpool.Conn) error) error {
	conn, err := r.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	var locked bool
	if err := conn.QueryRow(ctx, `select pg_try_advisory_lock(hashtext('gpubill.ledger.checkpoint'))`).Scan(&locked); err != nil {
		return fmt.Errorf("checkpoint lock: %w", err)
	}
	if !locked {
		return nil
	}
	defer conn.Exec(context.WithoutCancel(ctx), `select pg_advisory_unlock(hashtext('gpubill.ledger.checkpoint'))`) //nolint:errcheck // the session ends with the connection anyway
	return fn(conn)
}

// waitMax is how long a checkpoint waits for the writers open when it is
// fenced off.
func (r *Reports) waitMax() time.Duration {
	if r.WaitMax > 0 {
		return r.WaitMax
	}
	return checkpointWaitMax
}

// waitForOpenWriters takes a snapshot (after the horizon was raised) and
// waits until none of the transactions in progress in it that write
// ledger.postings (or are prepared: openWritersSQL) still is; returns how
// many still are after waitMax (0: none).
func waitForOpenWriters(ctx context.Context, conn *pgxpool.Conn, waitMax time.Duration) (int, error) {
	var snap string
	if err := conn.QueryRow(ctx, `select pg_current_snapshot()::text`).Scan(&snap); err != nil {
		return 0, fmt.Errorf("checkpoint snapshot: %w", err)
	}
	deadline := time.Now().Add(waitMax)
	for {
		var open int
		if err := conn.QueryRow(ctx, openWritersSQL, snap).Scan(&open); err != nil {
			return 0, fmt.Errorf("writers open at the checkpoint: %w", err)
		}
		if open == 0 || time.Now().After(deadline) {
			return open, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(checkpointWaitPoll):
		}
	}
}

// rebuildLate rebuilds, at the same instants and in order, every checkpoint
// at or after the earliest created_at that a writer marked late, then
// deletes the marks it read (one written meanwhile stays for the next
// round: its postings may have committed after the sums were read). A
// failure midway leaves the marks, and the next round rebuilds again.
// Returns how many checkpoints it rebuilt.
func rebuildLate(ctx context.Context, conn *pgxpool.Conn) (int, error) {
	var ids []int64
	var since *time.Time
	err := conn.QueryRow(ctx, `select coalesce(array_agg(id), '{}'), min(since) from ledger.checkpoint_late`).Scan(&ids, &since)
	if err != nil {
		return 0, fmt.Errorf("late postings: %w", err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	var prev *time.Time
	if err := conn.QueryRow(ctx, `select max(at) from ledger.balance_checkpoints where at < $1`, *since).Scan(&prev); err != nil {
		return 0, fmt.Errorf("checkpoint before the late postings: %w", err)
	}
	rows, err := conn.Query(ctx, `select at from ledger.balance_checkpoints where at >= $1 order by at`, *since)
	if err != nil {
		return 0, fmt.Errorf("checkpoints after the late postings: %w", err)
	}
	stale, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil {
		return 0, fmt.Errorf("checkpoints after the late postings: %w", err)
	}
	if err := dropCheckpoints(ctx, conn, *since); err != nil {
		return 0, err
	}
	for _, at := range stale {
		if err := buildCheckpoint(ctx, conn, prev, at); err != nil {
			return 0, fmt.Errorf("rebuild: %w", err)
		}
		prev = &at
	}
	if _, err := conn.Exec(ctx, `delete from ledger.checkpoint_late where id = any($1)`, ids); err != nil {
		return 0, fmt.Errorf("late postings rebuilt: %w", err)
	}
	return len(stale), nil
}

// dropCheckpoints removes the checkpoints at or after from (headers first,
// so no reader starts from one whose rows are going).
func dropCheckpoints(ctx context.Context, q Querier, from time.Time) error {
	if _, err := q.Exec(ctx, `delete from ledger.balance_checkpoints where at >= $1`, from); err != nil {
		return fmt.Errorf("drop checkpoints from %s: %w", from, err)
	}
	if _, err := q.Exec(ctx, `delete from ledger.checkpoint_balances where at >= $1`, from); err != nil {
		return fmt.Errorf("drop checkpoint balances from %s: %w", from, err)
	}
	return nil
}

func countPostings(ctx context.Context, q Querier, after *time.Time, upTo time.Time) (int64, error) {
	var n int64
	if err := q.QueryRow(ctx, `select count(*) from ledger.postings
		where created_at > $1 and created_at <= $2`, since(after), upTo).Scan(&n); err != nil {
		return 0, fmt.Errorf("count postings up to %s: %w", upTo, err)
	}
	return n, nil
}

func buildCheckpoint(ctx context.Context, conn *pgxpool.Conn, prev *time.Time, at time.Time) error {
	n, err := countPostings(ctx, conn, prev, at)
	if err != nil {
		return err
	}
	rows, err := conn.Query(ctx, `select currency, account, sum(n)::text from (
			select currency, account, net_debit as n from ledger.checkpoint_balances where at = $1
			union all
			select currency, account, case when direction = 'debit' then amount else -amount end from ledger.postings
			where created_at > $1 and created_at <= $2
		) x group by currency, account having sum(n) <> 0`, since(prev), at)
	if err != nil {
		return fmt.Errorf("checkpoint %s sums: %w", at, err)
	}
	var batch [][]any
	for rows.Next() {
		var cur, acc, sum string
		if err := rows.Scan(&cur, &acc, &sum); err != nil {
			rows.Close()
			return err
		}
		d, err := decimal.NewFromString(sum)
		if err != nil {
			rows.Close()
			return fmt.Errorf("checkpoint sum of %s: %w", acc, err)
		}
		batch = append(batch, []any{at, cur, acc, numeric(d)})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("checkpoint %s sums: %w", at, err)
	}
	for start := 0; start < len(batch); start += checkpointCopyRows {
		if _, err := conn.CopyFrom(ctx, pgx.Identifier{Schema, "checkpoint_balances"}, []string{"at", "currency", "account", "net_debit"},
			pgx.CopyFromRows(batch[start:min(start+checkpointCopyRows, len(batch))])); err != nil {
			return fmt.Errorf("checkpoint %s balances: %w", at, err)
		}
	}
	if _, err := conn.Exec(ctx, `insert into ledger.balance_checkpoints (at, prev_at, postings) values ($1, $2, $3)`, at, prev, n); err != nil {
		return fmt.Errorf("checkpoint %s: %w", at, err)
	}
	return nil
}
