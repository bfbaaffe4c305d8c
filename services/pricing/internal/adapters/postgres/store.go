// Package postgres is pricing's storage in its own schema.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"
)

// Schema is pricing's Postgres schema.
const Schema = "pricing"

// ErrNotFound is returned when a row does not exist.
var ErrNotFound = errors.New("not found")

// Store reads and writes pricing's tables.
type Store struct{ Pool *pgxpool.Pool }

// CardRow is a stored rate card version.
type CardRow struct {
	ID            string
	Currency      string
	EffectiveFrom time.Time
	Body          []byte
	Seq           int64
	CreatedAt     time.Time
}

const cardCols = `rate_card_id, currency, effective_from, body, seq, created_at`

func scanCard(row pgx.Row) (CardRow, error) {
	var c CardRow
	err := row.Scan(&c.ID, &c.Currency, &c.EffectiveFrom, &c.Body, &c.Seq, &c.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, ErrNotFound
	}
	c.EffectiveFrom, c.CreatedAt = c.EffectiveFrom.UTC(), c.CreatedAt.UTC()
	return c, err
}

// InsertCard inserts a card unless its id exists; it reports whether it did.
func (s *Store) InsertCard(ctx context.Context, c CardRow) (bool, error) {
	tag, err := s.Pool.Exec(ctx, `insert into pricing.rate_cards (rate_card_id, currency, effective_from, body, created_at)
		values ($1,$2,$3,$4,$5) on conflict (rate_card_id) do nothing`, c.ID, c.Currency, c.EffectiveFrom, c.Body, c.CreatedAt)
	if err != nil {
		return false, fmt.Errorf("insert rate card %s: %w", c.ID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Card reads one card.
func (s *Store) Card(ctx context.Context, id string) (CardRow, error) {
	return scanCard(s.Pool.QueryRow(ctx, `select `+cardCols+` from pricing.rate_cards where rate_card_id=$1`, id))
}

// Cards lists cards, newest effective first; after is a seq cursor position
// (the list is ordered by effective_from desc, seq desc).
func (s *Store) Cards(ctx context.Context, currency string, afterEff time.Time, afterSeq int64, limit int) ([]CardRow, error) {
	var after any
	if afterSeq > 0 {
		after = afterEff
	}
	rows, err := s.Pool.Query(ctx, `select `+cardCols+` from pricing.rate_cards
		where ($1 = '' or currency = $1) and ($2::timestamptz is null or (effective_from, seq) < ($2, $3))
		order by effective_from desc, seq desc limit $4`, currency, after, afterSeq, limit)
	if err != nil {
		return nil, fmt.Errorf("list rate cards: %w", err)
	}
	defer rows.Close()
	var out []CardRow
	for rows.Next() {
		c, err := scanCard(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// AllCards loads every card (the rating book; cards are few).
func (s *Store) AllCards(ctx context.Context) ([]CardRow, int64, error) {
	rows, err := s.Pool.Query(ctx, `select `+cardCols+` from pricing.rate_cards order by seq`)
	if err != nil {
		return nil, 0, fmt.Errorf("load rate cards: %w", err)
	}
	defer rows.Close()
	var out []CardRow
	var max int64
	for rows.Next() {
		c, err := scanCard(rows)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, c)
		max = c.Seq
	}
	return out, max, rows.Err()
}

// CardsSeq is the newest card's seq (0 when none): the rating book is
// reloaded when it moves.
func (s *Store) CardsSeq(ctx context.Context) (int64, error) {
	var seq int64
	err := s.Pool.QueryRow(ctx, `select coalesce(max(seq), 0) from pricing.rate_cards`).Scan(&seq)
	return seq, err
}

// LockRating serialises rating transactions (cumulative rounding and tier
// volume must see every earlier charge), across processes too.
func LockRating(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `select pg_advisory_xact_lock(hashtext('gpubill.pricing.rating'))`)
	return err
}

// LeaseKey names a lease's cumulative rounding state.
type LeaseKey struct{ LeaseID, Currency string }

// LeaseTotal is a lease's stored state.
type LeaseTotal struct{ ExactPS, Billed decimal.Decimal }

// LeaseTotals reads the state of the named leases.
func LeaseTotals(ctx context.Context, tx pgx.Tx, keys []LeaseKey) (map[LeaseKey]LeaseTotal, error) {
	ls, cs := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		ls[i], cs[i] = k.LeaseID, k.Currency
	}
	rows, err := tx.Query(ctx, `select t.lease_id, t.currency, t.exact_ps, t.billed
		from pricing.lease_totals t join unnest($1::text[], $2::text[]) as k(l, c) on t.lease_id = k.l and t.currency = k.c`, ls, cs)
	if err != nil {
		return nil, fmt.Errorf("lease totals: %w", err)
	}
	defer rows.Close()
	out := make(map[LeaseKey]LeaseTotal, len(keys))
	for rows.Next() {
		var k LeaseKey
		var t LeaseTotal
		if err := rows.Scan(&k.LeaseID, &k.Currency, &t.ExactPS, &t.Billed); err != nil {
			return nil, err
		}
		out[k] = t
	}
	return out, rows.Err()
}

// SaveLeaseTotals upserts lease states.
func SaveLeaseTotals(ctx context.Context, tx pgx.Tx, m map[LeaseKey]LeaseTotal, now time.Time) error {
	ls, cs := make([]string, 0, len(m)), make([]string, 0, len(m))
	ex, bi := make([]pgtype.Numeric, 0, len(m)), make([]pgtype.Numeric, 0, len(m))
	for k, t := range m {
		ls, cs, ex, bi = append(ls, k.LeaseID), append(cs, k.Currency), append(ex, numeric(t.ExactPS)), append(bi, numeric(t.Billed))
	}
	_, err := tx.Exec(ctx, `insert into pricing.lease_totals (lease_id, currency, exact_ps, billed, updated_at)
		select l, c, e, b, $5 from unnest($1::text[], $2::text[], $3::numeric[], $4::numeric[]) as x(l, c, e, b)
		on conflict (lease_id, currency) do update set exact_ps = excluded.exact_ps, billed = excluded.billed, updated_at = excluded.updated_at`,
		ls, cs, ex, bi, now)
	if err != nil {
		return fmt.Errorf("save lease totals: %w", err)
	}
	return nil
}

// MonthKey names a renter's tier month.
type MonthKey struct{ RenterID, Month string }

// TierUsage reads renters' monthly GPU-microseconds.
func TierUsage(ctx context.Context, tx pgx.Tx, keys []MonthKey) (map[MonthKey]int64, error) {
	rs, ms := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		rs[i], ms[i] = k.RenterID, k.Month
	}
	rows, err := tx.Query(ctx, `select t.renter_id, t.month, t.gpu_micros
		from pricing.tier_usage t join unnest($1::text[], $2::text[]) as k(r, m) on t.renter_id = k.r and t.month = k.m`, rs, ms)
	if err != nil {
		return nil, fmt.Errorf("tier usage: %w", err)
	}
	defer rows.Close()
	out := make(map[MonthKey]int64, len(keys))
	for rows.Next() {
		var k MonthKey
		var v int64
		if err := rows.Scan(&k.RenterID, &k.Month, &v); err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, rows.Err()
}

// SaveTierUsage upserts renters' monthly GPU-microseconds.
func SaveTierUsage(ctx context.Context, tx pgx.Tx, m map[MonthKey]int64) error {
	rs, ms, vs := make([]string, 0, len(m)), make([]string, 0, len(m)), make([]int64, 0, len(m))
	for k, v := range m {
		rs, ms, vs = append(rs, k.RenterID), append(ms, k.Month), append(vs, v)
	}
	_, err := tx.Exec(ctx, `insert into pricing.tier_usage (renter_id, month, gpu_micros)
		select * from unnest($1::text[], $2::text[], $3::bigint[])
		on conflict (renter_id, month) do update set gpu_micros = excluded.gpu_micros`, rs, ms, vs)
	if err != nil {
		return fmt.Errorf("save tier usage: %w", err)
	}
	return nil
}

// ChargeRow is a rated charge; Lines is its jsonb array of lines.
type ChargeRow struct {
	ChargeID, SourceID, LeaseID, RenterID, ProviderID, CycleID, Currency string
	Amount, ExactAmount, ExactPS                                         decimal.Decimal
	EventIDs                                                             []string
	EffectiveAt                                                          time.Time
	Lines                                                                []byte
}

// Line is one line of a charge as stored in charges.lines (decimals as
// exact strings, times RFC 3339 UTC). EventID names the usage event the line
// prices (the first one, when the line aggregates several events of the
// charge); lines written before it was recorded have no event_id key.
type Line struct {
	EventID    string `json:"event_id"`
	Kind       string `json:"kind"`
	GPUModel   string `json:"gpu_model"`
	GPUCount   int32  `json:"gpu_count"`
	Band       string `json:"band"`
	Tier       string `json:"tier"`
	RateCardID string `json:"rate_card_id"`
	Start      string `json:"start_time"`
	End        string `json:"end_time"`
	GPUHours   string `json:"gpu_hours"`
	UnitPrice  string `json:"unit_price"`
	Multiplier string `json:"multiplier"`
	Amount     string `json:"amount"`
}

// numeric encodes d as Postgres numeric without a text round trip, with
// the scale decimal's String gives (no trailing fractional zeros), so stored
// values read back as they always did ("0", not "0.00").
func numeric(d decimal.Decimal) pgtype.Numeric {
	c, e := d.Coefficient(), d.Exponent()
	if c.Sign() == 0 {
		return pgtype.Numeric{Int: c, Exp: 0, Valid: true}
	}
	var q, r big.Int
	for e < 0 {
		q.QuoRem(c, ten, &r)
		if r.Sign() != 0 {
			break
		}
		c, e = new(big.Int).Set(&q), e+1
	}
	return pgtype.Numeric{Int: c, Exp: e, Valid: true}
}

var ten = big.NewInt(10)

// InsertCharges writes charges, their lines inline, with one COPY.
func InsertCharges(ctx context.Context, tx pgx.Tx, cs []ChargeRow, now time.Time) error {
	_, err := tx.CopyFrom(ctx, pgx.Identifier{Schema, "charges"},
		[]string{"charge_id", "source_id", "lease_id", "renter_id", "provider_id", "cycle_id", "currency", "amount",
			"exact_amount", "exact_ps", "event_ids", "effective_at", "created_at", "lines"},
		pgx.CopyFromSlice(len(cs), func(i int) ([]any, error) {
			c := cs[i]
			return []any{c.ChargeID, c.SourceID, c.LeaseID, c.RenterID, c.ProviderID, c.CycleID, c.Currency, numeric(c.Amount),
				numeric(c.ExactAmount), numeric(c.ExactPS), c.EventIDs, c.EffectiveAt, now, string(c.Lines)}, nil
		}))
	if err != nil {
		return fmt.Errorf("insert charges: %w", err)
	}
	return nil
}

// PendingRow is usage waiting for a rate card.
type PendingRow struct {
	EventID, MessageID, RenterID, Currency, GPUModel string
	Payload                                          []byte
	Reason                                           string
}

// AddPending records usage no card can price yet (a repeat only counts an attempt).
func AddPending(ctx context.Context, tx pgx.Tx, ps []PendingRow, now time.Time) error {
	if len(ps) == 0 {
		return nil
	}
	n := len(ps)
	ev, msg, rent, cur, model, reason := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	payload := make([][]byte, n)
	for i, p := range ps {
		ev[i], msg[i], rent[i], cur[i], model[i], payload[i], reason[i] = p.EventID, p.MessageID, p.RenterID, p.Currency, p.GPUModel, p.Payload, p.Reason
	}
	_, err := tx.Exec(ctx, `insert into pricing.pending_rating
		(event_id, message_id, renter_id, currency, gpu_model, payload, reason, created_at, last_attempt_at)
		select e, m, r, c, g, p, x, $8, $8 from unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bytea[], $7::text[]) as t(e, m, r, c, g, p, x)
		on conflict (event_id) do update set attempts = pending_rating.attempts + 1, reason = excluded.reason, last_attempt_at = excluded.last_attempt_at`,
		ev, msg, rent, cur, model, payload, reason, now)
	if err != nil {
		return fmt.Errorf("record pending usage: %w", err)
	}
	return nil
}

// Pending lists usage waiting for a rate card, oldest first.
func (s *Store) Pending(ctx context.Context, limit int) ([]PendingRow, error) {
	rows, err := s.Pool.Query(ctx, `select event_id, message_id, renter_id, currency, gpu_model, payload, reason
		from pricing.pending_rating order by created_at, event_id limit $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("pending usage: %w", err)
	}
	defer rows.Close()
	var out []PendingRow
	for rows.Next() {
		var p PendingRow
		if err := rows.Scan(&p.EventID, &p.MessageID, &p.RenterID, &p.Currency, &p.GPUModel, &p.Payload, &p.Reason); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// TakePending deletes pending rows and returns the ids it deleted: only those
// are rated, so two retriers never rate one event twice.
func TakePending(ctx context.Context, tx pgx.Tx, ids []string) (map[string]bool, error) {
	rows, err := tx.Query(ctx, `delete from pricing.pending_rating where event_id = any($1) returning event_id`, ids)
	if err != nil {
		return nil, fmt.Errorf("take pending: %w", err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(got))
	for _, id := range got {
		out[id] = true
	}
	return out, nil
}
