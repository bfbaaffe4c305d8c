// Package postgres is pricing's storage in its own schema: it implements
// app.Store and app.Tx, and encodes what it keeps or publishes as protobuf
// (rate card bodies, pending usage, charges.rated) in events.go.
package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/jsonplain"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/services/pricing/internal/app"
	"github.com/gpubill/gpubill/services/pricing/internal/domain"
)

// Schema is pricing's Postgres schema.
const Schema = "pricing"

// Store reads and writes pricing's tables.
type Store struct{ Pool *pgxpool.Pool }

// NewStore returns the store on pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{Pool: pool} }

// Tx is the store inside one rating transaction.
type Tx struct {
	tx   pgx.Tx
	held *[]outbox.Message // outbox rows copied, for outbox.Hold once committed (outbox.InTx)
	// stored names the leases LeaseTotals found a row for: SaveLeaseTotals
	// updates those and copies in the others.
	stored map[domain.LeaseCurrency]bool
}

var (
	_ app.Store = (*Store)(nil)
	_ app.Tx    = (*Tx)(nil)
)

// WithTx runs fn in one READ COMMITTED transaction, committing if it returns nil.
// The charges.rated it copied into the outbox is held for this process's
// relay once committed (outbox.Hold), which publishes it without reading
// it back.
func (s *Store) WithTx(ctx context.Context, fn func(app.Tx) error) error {
	return outbox.InTx(ctx, s.Pool, Schema, func(tx pgx.Tx, held *[]outbox.Message) error { return fn(&Tx{tx: tx, held: held}) })
}

const cardCols = `rate_card_id, currency, effective_from, body, seq, created_at`

func scanCard(row pgx.Row) (domain.StoredCard, error) {
	var c domain.StoredCard
	var body []byte
	err := row.Scan(&c.ID, &c.Currency, &c.EffectiveFrom, &body, &c.Seq, &c.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, apperr.ErrNotFound
	}
	if err != nil {
		return c, err
	}
	c.EffectiveFrom, c.CreatedAt = c.EffectiveFrom.UTC(), c.CreatedAt.UTC()
	if c.Body, err = decodeCardBody(body); err != nil {
		return c, fmt.Errorf("rate card %s: %w", c.ID, err)
	}
	return c, nil
}

// InsertCard inserts a card unless its id exists; it reports whether it did.
func (s *Store) InsertCard(ctx context.Context, c domain.StoredCard) (bool, error) {
	body, err := encodeCardBody(c.Body)
	if err != nil {
		return false, err
	}
	tag, err := s.Pool.Exec(ctx, `insert into pricing.rate_cards (rate_card_id, currency, effective_from, body, created_at)
		values ($1,$2,$3,$4,$5) on conflict (rate_card_id) do nothing`, c.ID, c.Currency, c.EffectiveFrom, body, c.CreatedAt)
	if err != nil {
		return false, fmt.Errorf("insert rate card %s: %w", c.ID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Card reads one card.
func (s *Store) Card(ctx context.Context, id string) (domain.StoredCard, error) {
	return scanCard(s.Pool.QueryRow(ctx, `select `+cardCols+` from pricing.rate_cards where rate_card_id=$1`, id))
}

// Cards lists cards, newest effective first; after is a seq cursor position
// (the list is ordered by effective_from desc, seq desc).
func (s *Store) Cards(ctx context.Context, currency string, afterEff time.Time, afterSeq int64, limit int) ([]domain.StoredCard, error) {
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
	var out []domain.StoredCard
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
func (s *Store) AllCards(ctx context.Context) ([]domain.StoredCard, int64, error) {
	rows, err := s.Pool.Query(ctx, `select `+cardCols+` from pricing.rate_cards order by seq`)
	if err != nil {
		return nil, 0, fmt.Errorf("load rate cards: %w", err)
	}
	defer rows.Close()
	var out []domain.StoredCard
	for rows.Next() {
		c, err := scanCard(rows)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, c)
	}
	return out, int64(len(out)), rows.Err()
}

// CardsSeq is the number of cards (cards are never changed or removed):
// the rating book is reloaded when it moves. The newest card's seq was
// read before: a card whose insert took the lower seq but committed after
// a book was loaded with the higher one was never loaded.
func (s *Store) CardsSeq(ctx context.Context) (int64, error) {
	var n int64
	err := s.Pool.QueryRow(ctx, `select count(*) from pricing.rate_cards`).Scan(&n)
	return n, err
}

// LockRating serialises rating transactions (cumulative rounding and tier
// volume must see every earlier charge), across processes too. In the same
// round trip it has the transaction's statements use generic plans: each
// takes its keys as arrays whose length varies from batch to batch, so the
// plan cache otherwise re-planned them every time (4-7 % of rating's
// Postgres CPU in a perf profile), for the same index-driven plans.
func (t *Tx) LockRating(ctx context.Context) error {
	_, err := t.tx.Exec(ctx, `select pg_advisory_xact_lock(hashtext('gpubill.pricing.rating')),
		set_config('plan_cache_mode', 'force_generic_plan', true)`)
	return err
}

// LeaseTotals reads the state of the named leases.
func (t *Tx) LeaseTotals(ctx context.Context, keys []domain.LeaseCurrency) (map[domain.LeaseCurrency]domain.LeaseTotal, error) {
	ls, cs := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		ls[i], cs[i] = k.LeaseID, k.Currency
	}
	rows, err := t.tx.Query(ctx, `select t.lease_id, t.currency, t.exact_ps, t.billed
		from pricing.lease_totals t join unnest($1::text[], $2::text[]) as k(l, c) on t.lease_id = k.l and t.currency = k.c`, ls, cs)
	if err != nil {
		return nil, fmt.Errorf("lease totals: %w", err)
	}
	defer rows.Close()
	out := make(map[domain.LeaseCurrency]domain.LeaseTotal, len(keys))
	if t.stored == nil {
		t.stored = map[domain.LeaseCurrency]bool{}
	}
	for rows.Next() {
		var k domain.LeaseCurrency
		var lt domain.LeaseTotal
		if err := rows.Scan(&k.LeaseID, &k.Currency, &lt.ExactPS, &lt.Billed); err != nil {
			return nil, err
		}
		out[k] = lt
		t.stored[k] = true
	}
	return out, rows.Err()
}

// SaveLeaseTotals writes lease states: an UPDATE of those LeaseTotals found
// stored and one binary COPY of the others. Rating holds LockRating, the
// only way into lease_totals, so a lease LeaseTotals did not find has no
// row until this COPY: the upsert before it (ON CONFLICT: a second descent
// of the key and a speculative-insertion lock per row, its values bound as
// arrays) cost the server 6.2-7.4 µs per new lease in the pipeline bench,
// the COPY 3.5-4.1 (DEVELOPERS.md). Should a row exist after all, the COPY fails on
// the key and the rating transaction rolls back; the update must find
// every row it names, or it fails too.
func (t *Tx) SaveLeaseTotals(ctx context.Context, m map[domain.LeaseCurrency]domain.LeaseTotal, now time.Time) error {
	var ls, cs []string
	var ex, bi []pgtype.Numeric
	w := pg.NewCopyWriter(len(m) * leaseTotalRowBytesEst)
	fresh := 0
	for k, lt := range m {
		if t.stored[k] {
			ls, cs, ex, bi = append(ls, k.LeaseID), append(cs, k.Currency), append(ex, numeric(lt.ExactPS)), append(bi, numeric(lt.Billed))
			continue
		}
		w.Row(5)
		w.Text(k.LeaseID)
		w.Text(k.Currency)
		w.NumericTrimmed(lt.ExactPS)
		w.NumericTrimmed(lt.Billed)
		w.Timestamptz(now)
		fresh++
	}
	if len(ls) > 0 {
		tag, err := t.tx.Exec(ctx, `update pricing.lease_totals t set exact_ps = x.e, billed = x.b, updated_at = $5
			from unnest($1::text[], $2::text[], $3::numeric[], $4::numeric[]) as x(l, c, e, b)
			where t.lease_id = x.l and t.currency = x.c`, ls, cs, ex, bi, now)
		if err != nil {
			return fmt.Errorf("save lease totals: %w", err)
		}
		if n := tag.RowsAffected(); n != int64(len(ls)) {
			return fmt.Errorf("save lease totals: updated %d of %d stored leases", n, len(ls))
		}
	}
	if fresh > 0 {
		if _, err := t.tx.Conn().PgConn().CopyFrom(ctx, bytes.NewReader(w.Done()),
			`copy pricing.lease_totals (lease_id, currency, exact_ps, billed, updated_at) from stdin (format binary)`); err != nil {
			return fmt.Errorf("save lease totals: %w", err)
		}
	}
	return nil
}

// leaseTotalRowBytesEst sizes a lease_totals row for the first allocation:
// 5 fields of 4-byte lengths, the lease id, currency, two numerics, a time.
const leaseTotalRowBytesEst = 2 + 5*4 + 24 + 3 + 2*24 + 8

// TierUsage reads renters' monthly GPU-microseconds.
func (t *Tx) TierUsage(ctx context.Context, keys []domain.RenterMonth) (map[domain.RenterMonth]int64, error) {
	rs, ms := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		rs[i], ms[i] = k.RenterID, k.Month
	}
	rows, err := t.tx.Query(ctx, `select t.renter_id, t.month, t.gpu_micros
		from pricing.tier_usage t join unnest($1::text[], $2::text[]) as k(r, m) on t.renter_id = k.r and t.month = k.m`, rs, ms)
	if err != nil {
		return nil, fmt.Errorf("tier usage: %w", err)
	}
	defer rows.Close()
	out := make(map[domain.RenterMonth]int64, len(keys))
	for rows.Next() {
		var k domain.RenterMonth
		var v int64
		if err := rows.Scan(&k.RenterID, &k.Month, &v); err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, rows.Err()
}

// SaveTierUsage upserts renters' monthly GPU-microseconds.
func (t *Tx) SaveTierUsage(ctx context.Context, m map[domain.RenterMonth]int64) error {
	rs, ms, vs := make([]string, 0, len(m)), make([]string, 0, len(m)), make([]int64, 0, len(m))
	for k, v := range m {
		rs, ms, vs = append(rs, k.RenterID), append(ms, k.Month), append(vs, v)
	}
	_, err := t.tx.Exec(ctx, `insert into pricing.tier_usage (renter_id, month, gpu_micros)
		select * from unnest($1::text[], $2::text[], $3::bigint[])
		on conflict (renter_id, month) do update set gpu_micros = excluded.gpu_micros`, rs, ms, vs)
	if err != nil {
		return fmt.Errorf("save tier usage: %w", err)
	}
	return nil
}

// line is one line of a charge as stored in charges.lines (decimals as
// exact strings, times RFC 3339 UTC). EventID names the usage event the line
// prices (the first one, when the line aggregates several events of the
// charge); lines written before it was recorded have no event_id key.
type line struct {
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

// appendLines appends lines as JSON, the bytes json.Marshal writes for them
// (TestLinesJSONIsMarshal), without its reflection: marshalling them was
// ~1.4 % of this process's CPU in the pipeline bench. A string that is not
// valid UTF-8, or needs an escape, goes through json.Marshal.
func appendLines(b []byte, ls []line) ([]byte, error) {
	if ls == nil {
		return append(b, "null"...), nil
	}
	b = append(b, '[')
	var err error
	for i := range ls {
		l := &ls[i]
		if i > 0 {
			b = append(b, ',')
		}
		for _, f := range [...]struct{ key, s string }{{`{"event_id":`, l.EventID}, {`,"kind":`, l.Kind}, {`,"gpu_model":`, l.GPUModel}} {
			if b, err = appendField(b, f.key, f.s); err != nil {
				return nil, err
			}
		}
		b = strconv.AppendInt(append(b, `,"gpu_count":`...), int64(l.GPUCount), 10)
		for _, f := range [...]struct{ key, s string }{{`,"band":`, l.Band}, {`,"tier":`, l.Tier}, {`,"rate_card_id":`, l.RateCardID},
			{`,"start_time":`, l.Start}, {`,"end_time":`, l.End}, {`,"gpu_hours":`, l.GPUHours}, {`,"unit_price":`, l.UnitPrice},
			{`,"multiplier":`, l.Multiplier}, {`,"amount":`, l.Amount}} {
			if b, err = appendField(b, f.key, f.s); err != nil {
				return nil, err
			}
		}
		b = append(b, '}')
	}
	return append(b, ']'), nil
}

// appendField appends key and s as a JSON string, as json.Marshal writes it.
func appendField(b []byte, key, s string) ([]byte, error) {
	return jsonplain.AppendString(append(b, key...), s)
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

// chargeRowBytesEst sizes a charge row for the first allocation: 14 fields
// of 4-byte lengths, ids and names, three numerics, ten event ids and the
// lines' JSON.
const chargeRowBytesEst = 2 + 14*4 + 200 + 3*24 + 10*24 + 2*8 + 700

// InsertCharges writes charges, their lines inline, with one binary COPY
// written by pg.CopyWriter (pgx.CopyFrom boxed each value and turned each
// amount into a big.Int first). Amounts are stored as their String,
// without trailing fractional zeros, as they always were ("0", not "0.00").
func (t *Tx) InsertCharges(ctx context.Context, cs []domain.Charge, now time.Time) error {
	w := pg.NewCopyWriter(len(cs) * chargeRowBytesEst)
	var buf []line       // reused: one charge's lines at a time
	var linesJSON []byte // reused: their JSON
	for i := range cs {
		c := &cs[i]
		buf = buf[:0]
		for _, l := range c.Lines {
			buf = append(buf, line{EventID: l.EventID, Kind: l.Kind, GPUModel: l.GPUModel, GPUCount: l.GPUCount, Band: l.Band,
				Tier: l.Tier, RateCardID: l.RateCardID, Start: l.Start.UTC().Format(time.RFC3339Nano), End: l.End.UTC().Format(time.RFC3339Nano),
				GPUHours: l.GPUHours, UnitPrice: l.UnitPrice, Multiplier: l.Multiplier, Amount: l.Amount})
		}
		var err error
		if linesJSON, err = appendLines(linesJSON[:0], buf); err != nil {
			return fmt.Errorf("insert charges: %w", err)
		}
		w.Row(14)
		w.Text(c.ID)
		w.Text(c.SourceID)
		w.Text(c.LeaseID)
		w.Text(c.RenterID)
		w.Text(c.ProviderID)
		w.Text(c.CycleID)
		w.Text(c.Currency.Code)
		w.NumericTrimmed(c.Amount)
		w.NumericTrimmed(c.ExactAmount)
		w.NumericTrimmed(c.ExactPS)
		w.TextArray(c.EventIDs)
		w.Timestamptz(c.EffectiveAt)
		w.Timestamptz(now)
		w.JSONB(linesJSON)
	}
	if _, err := t.tx.Conn().PgConn().CopyFrom(ctx, bytes.NewReader(w.Done()), `copy pricing.charges
		(charge_id, source_id, lease_id, renter_id, provider_id, cycle_id, currency, amount, exact_amount, exact_ps,
		 event_ids, effective_at, created_at, lines) from stdin (format binary)`); err != nil {
		return fmt.Errorf("insert charges: %w", err)
	}
	return nil
}

// AddPending records usage no card can price yet (a repeat only counts an attempt).
func (t *Tx) AddPending(ctx context.Context, ps []domain.PendingUsage, now time.Time) error {
	if len(ps) == 0 {
		return nil
	}
	n := len(ps)
	ev, msg, rent, cur, model, reason := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	payload := make([][]byte, n)
	for i, p := range ps {
		b, err := encodeUsageEvent(&p.Event)
		if err != nil {
			return err
		}
		e := &p.Event
		ev[i], msg[i], rent[i], cur[i], model[i], payload[i], reason[i] = e.ID, p.MessageID, e.RenterID, e.Currency, e.GPUModel, b, p.Reason
	}
	_, err := t.tx.Exec(ctx, `insert into pricing.pending_rating
		(event_id, message_id, renter_id, currency, gpu_model, payload, reason, created_at, last_attempt_at)
		select e, m, r, c, g, p, x, $8, $8 from unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bytea[], $7::text[]) as t(e, m, r, c, g, p, x)
		on conflict (event_id) do update set attempts = pending_rating.attempts + 1, reason = excluded.reason, last_attempt_at = excluded.last_attempt_at`,
		ev, msg, rent, cur, model, payload, reason, now)
	if err != nil {
		return fmt.Errorf("record pending usage: %w", err)
	}
	return nil
}

// Pending lists usage waiting for a rate card, oldest first, after the row
// waiting since afterSince with event id afterID (zero time: from the
// first), and the last row it read. A row whose payload does not decode is
// left out (it stays visible in pending_rating with its reason).
func (s *Store) Pending(ctx context.Context, afterSince time.Time, afterID string, limit int) ([]domain.PendingUsage, time.Time, string, error) {
	after := pgtype.Timestamptz{Time: afterSince, Valid: true}
	if afterSince.IsZero() {
		after = pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	}
	rows, err := s.Pool.Query(ctx, `select message_id, payload, reason, created_at, event_id
		from pricing.pending_rating where (created_at, event_id) > ($1, $2)
		order by created_at, event_id limit $3`, after, afterID, limit)
	if err != nil {
		return nil, time.Time{}, "", fmt.Errorf("pending usage: %w", err)
	}
	defer rows.Close()
	var out []domain.PendingUsage
	var lastSince time.Time
	var lastID string
	for rows.Next() {
		var p domain.PendingUsage
		var payload []byte
		if err := rows.Scan(&p.MessageID, &payload, &p.Reason, &lastSince, &lastID); err != nil {
			return nil, time.Time{}, "", err
		}
		if p.Event, err = decodeUsageEvent(payload); err != nil {
			continue
		}
		out = append(out, p)
	}
	return out, lastSince, lastID, rows.Err()
}

// TakePending deletes pending rows and returns the ids it deleted: only those
// are rated, so two retriers never rate one event twice.
func (t *Tx) TakePending(ctx context.Context, ids []string) (map[string]bool, error) {
	rows, err := t.tx.Query(ctx, `delete from pricing.pending_rating where event_id = any($1) returning event_id`, ids)
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

// Claim records inbound message ids in the inbox and returns the fresh ones.
func (t *Tx) Claim(ctx context.Context, consumer string, ids []string) (map[string]bool, error) {
	return outbox.Claim(ctx, t.tx, Schema, consumer, ids)
}
