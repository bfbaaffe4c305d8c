package postgres

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
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
type Reports struct{ Pool *pgxpool.Pool }

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

// Balances returns the non-zero debits - credits per account in currency:
// now (asOf nil) from the maintained balances; as of an instant from the
// latest checkpoint at or before it plus the postings created since (the
// BRIN index on created_at), never a scan of the journal.
func (r *Reports) Balances(ctx context.Context, currency string, asOf *time.Time) ([]domain.AccountNet, error) {
	var rows pgx.Rows
	var err error
	if asOf == nil {
		rows, err = r.Pool.Query(ctx, `select account, (debits - credits)::text from ledger.balances
			where currency = $1 and debits <> credits`, currency)
	} else {
		cp, cerr := r.LatestCheckpoint(ctx, asOf)
		if cerr != nil {
			return nil, cerr
		}
		var from *time.Time
		if cp != nil {
			from = &cp.At
		}
		rows, err = r.Pool.Query(ctx, `select account, sum(n)::text from (
				select account, net_debit as n from ledger.checkpoint_balances where at = $2 and currency = $1
				union all
				select account, case when direction = 'debit' then amount else -amount end from ledger.postings
				where currency = $1 and ($2::timestamptz is null or created_at > $2) and created_at <= $3
			) x group by account having sum(n) <> 0`, currency, from, *asOf)
	}
	if err != nil {
		return nil, fmt.Errorf("balances of %s: %w", currency, err)
	}
	defer rows.Close()
	var out []domain.AccountNet
	for rows.Next() {
		var a domain.AccountNet
		var s string
		if err := rows.Scan(&a.Account, &s); err != nil {
			return nil, err
		}
		if a.NetDebit, err = decimal.NewFromString(s); err != nil {
			return nil, fmt.Errorf("balance of %s: %w", a.Account, err)
		}
		out = append(out, a)
	}
	return out, rows.Err()
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

// insertBreaches records the breaches among freshly posted transactions
// (inside the posting transaction).
func insertBreaches(ctx context.Context, tx pgx.Tx, txs []*domain.Transaction) error {
	var rows [][]any
	for _, t := range txs {
		bs := domain.SegregationBreaches(t.Postings)
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

// BackfillBreaches classifies, once, the transactions posted before breaches
// were recorded when posted: only transactions touching a house account can
// cross pools. Idempotent (rows are keyed by transaction and position).
func (r *Reports) BackfillBreaches(ctx context.Context) error {
	var done *time.Time
	err := r.Pool.QueryRow(ctx, `select done_at from ledger.report_backfills where name = 'segregation_breaches'`).Scan(&done)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && done != nil) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("breach backfill state: %w", err)
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
			var fresh []*domain.Transaction
			for _, t := range txs {
				var n int
				if err := tx.QueryRow(ctx, `select count(*) from ledger.segregation_breaches where tx_id = $1::uuid`, t.ID).Scan(&n); err != nil {
					return err
				}
				if n == 0 {
					fresh = append(fresh, t)
				}
			}
			return insertBreaches(ctx, tx, fresh)
		}); err != nil {
			return err
		}
	}
	_, err = r.Pool.Exec(ctx, `update ledger.report_backfills set done_at = now() where name = 'segregation_breaches'`)
	return err
}

// PostingsSince counts the postings created in (after, upTo], stopping at
// limit (nil after: from the start).
func (r *Reports) PostingsSince(ctx context.Context, after *time.Time, upTo time.Time, limit int64) (int64, error) {
	var n int64
	err := r.Pool.QueryRow(ctx, `select count(*) from (select 1 from ledger.postings
		where ($1::timestamptz is null or created_at > $1) and created_at <= $2 limit $3) x`, after, upTo, limit).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count postings: %w", err)
	}
	return n, nil
}

// MakeCheckpoint writes the checkpoint at `at` from the latest one before it
// plus the postings created since, in one statement. A checkpoint whose
// interval has since received a posting (one committed late, its created_at
// already folded past) is dropped with every later one and rebuilt first.
func (r *Reports) MakeCheckpoint(ctx context.Context, at time.Time) error {
	return pg.InTx(ctx, r.Pool, func(tx pgx.Tx) error {
		// One checkpointer at a time.
		if _, err := tx.Exec(ctx, `select pg_advisory_xact_lock(hashtext('gpubill.ledger.checkpoint'))`); err != nil {
			return err
		}
		var prev *time.Time
		var prevPrev *time.Time
		var prevN int64
		err := tx.QueryRow(ctx, `select at, prev_at, postings from ledger.balance_checkpoints where at < $1 order by at desc limit 1`, at).
			Scan(&prev, &prevPrev, &prevN)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("previous checkpoint: %w", err)
		}
		if prev != nil {
			var n int64
			if err := tx.QueryRow(ctx, `select count(*) from ledger.postings
				where ($1::timestamptz is null or created_at > $1) and created_at <= $2`, prevPrev, *prev).Scan(&n); err != nil {
				return fmt.Errorf("recount checkpoint %s: %w", prev, err)
			}
			if n != prevN { // a late posting: rebuild from the one before
				if _, err := tx.Exec(ctx, `delete from ledger.balance_checkpoints where at >= $1`, *prev); err != nil {
					return err
				}
				if err := buildCheckpoint(ctx, tx, prevPrev, *prev); err != nil {
					return err
				}
			}
		}
		if _, err := tx.Exec(ctx, `delete from ledger.balance_checkpoints where at >= $1`, at); err != nil {
			return err
		}
		return buildCheckpoint(ctx, tx, prev, at)
	})
}

func buildCheckpoint(ctx context.Context, tx pgx.Tx, prev *time.Time, at time.Time) error {
	var n int64
	if err := tx.QueryRow(ctx, `select count(*) from ledger.postings
		where ($1::timestamptz is null or created_at > $1) and created_at <= $2`, prev, at).Scan(&n); err != nil {
		return fmt.Errorf("count checkpoint postings: %w", err)
	}
	if _, err := tx.Exec(ctx, `insert into ledger.balance_checkpoints (at, prev_at, postings) values ($1, $2, $3)`, at, prev, n); err != nil {
		return fmt.Errorf("checkpoint %s: %w", at, err)
	}
	if _, err := tx.Exec(ctx, `insert into ledger.checkpoint_balances (at, currency, account, net_debit)
		select $2, currency, account, sum(n) from (
			select currency, account, net_debit as n from ledger.checkpoint_balances where at = $1
			union all
			select currency, account, case when direction = 'debit' then amount else -amount end from ledger.postings
			where ($1::timestamptz is null or created_at > $1) and created_at <= $2
		) x group by currency, account having sum(n) <> 0`, prev, at); err != nil {
		return fmt.Errorf("checkpoint %s balances: %w", at, err)
	}
	return nil
}
