// Package postgres is metering's storage in its own schema: it implements
// app.Store and app.Tx, and writes the events a write publishes into the
// outbox in the same transaction (events.go).
package postgres

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/gpucatalog"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/services/metering/internal/app"
	"github.com/gpubill/gpubill/services/metering/internal/domain"
)

// Schema is metering's Postgres schema.
const Schema = "metering"

// Store reads and writes metering's tables.
type Store struct{ Pool *pgxpool.Pool }

// NewStore returns the store on pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{Pool: pool} }

// Tx is the store inside one transaction.
type Tx struct {
	tx   pgx.Tx
	held *[]outbox.Message // outbox rows copied, for outbox.Hold once committed (outbox.InTx)
}

var (
	_ app.Store = (*Store)(nil)
	_ app.Tx    = (*Tx)(nil)
)

// WithTx runs fn in one READ COMMITTED transaction, committing if it returns nil.
// The usage.recorded it copied into the outbox is held for this process's
// relay once committed (outbox.Hold), which publishes it without reading
// it back.
func (s *Store) WithTx(ctx context.Context, fn func(app.Tx) error) error {
	return outbox.InTx(ctx, s.Pool, Schema, func(tx pgx.Tx, held *[]outbox.Message) error { return fn(&Tx{tx: tx, held: held}) })
}

// catalogueVersionSQL is the catalogue's version: every write of a model
// adds a row or raises its version, and models are never deleted, so the
// pair moves on every write. It reads at most gpucatalog.ModelsMax small
// rows, once per ingest batch.
const catalogueVersionSQL = `count(*) over (), coalesce(sum(version) over (), 0)`

// GPUCatalogueVersion returns the catalogue's version, without its names.
func (s *Store) GPUCatalogueVersion(ctx context.Context) (app.CatalogueVersion, error) {
	var v app.CatalogueVersion
	if err := s.Pool.QueryRow(ctx, `select count(*), coalesce(sum(version), 0) from metering.gpu_models`).Scan(&v.Models, &v.Versions); err != nil {
		return v, fmt.Errorf("gpu catalogue version: %w", err)
	}
	return v, nil
}

// GPUModels returns the GPU catalogue's names (ids and aliases) by key, and
// the version they are of (read in the same statement, so they agree).
func (s *Store) GPUModels(ctx context.Context) (gpucatalog.Index, app.CatalogueVersion, error) {
	var v app.CatalogueVersion
	rows, err := s.Pool.Query(ctx, `select gpu_model, aliases, `+catalogueVersionSQL+` from metering.gpu_models`)
	if err != nil {
		return nil, v, fmt.Errorf("load gpu models: %w", err)
	}
	models, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (gpucatalog.Model, error) {
		var m gpucatalog.Model
		return m, r.Scan(&m.ID, &m.Aliases, &v.Models, &v.Versions)
	})
	if err != nil {
		return nil, v, fmt.Errorf("load gpu models: %w", err)
	}
	ix, err := gpucatalog.NewIndex(models)
	return ix, v, err
}

const providerCols = `provider_id, name, tier, tax_profile, jurisdiction, pue, currency, version, created_at, updated_at`

func scanProvider(row pgx.Row) (domain.Provider, error) {
	var p domain.Provider
	var pue decimal.NullDecimal
	if err := row.Scan(&p.ID, &p.Name, &p.Tier, &p.TaxProfile, &p.Jurisdiction, &pue, &p.Currency, &p.Version, &p.CreatedAt, &p.UpdatedAt); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return p, apperr.ErrNotFound
		}
		return p, err
	}
	if pue.Valid {
		p.PUE = &pue.Decimal
	}
	return p, nil
}

func nullPUE(p *decimal.Decimal) decimal.NullDecimal {
	if p == nil {
		return decimal.NullDecimal{}
	}
	return decimal.NullDecimal{Decimal: *p, Valid: true}
}

// InsertProvider inserts p unless its id exists; it reports whether it did.
func (t *Tx) InsertProvider(ctx context.Context, p domain.Provider) (bool, error) {
	tag, err := t.tx.Exec(ctx, `insert into metering.providers (`+providerCols+`)
		values ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10) on conflict (provider_id) do nothing`,
		p.ID, p.Name, p.Tier, p.TaxProfile, p.Jurisdiction, nullPUE(p.PUE), p.Currency, p.Version, p.CreatedAt, p.UpdatedAt)
	if err != nil {
		return false, fmt.Errorf("insert provider %s: %w", p.ID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// UpdateProvider writes every mutable field of p.
func (t *Tx) UpdateProvider(ctx context.Context, p domain.Provider) error {
	_, err := t.tx.Exec(ctx, `update metering.providers set name=$2, tier=$3, tax_profile=$4, jurisdiction=$5,
		pue=$6, currency=$7, version=$8, updated_at=$9 where provider_id=$1`,
		p.ID, p.Name, p.Tier, p.TaxProfile, p.Jurisdiction, nullPUE(p.PUE), p.Currency, p.Version, p.UpdatedAt)
	if err != nil {
		return fmt.Errorf("update provider %s: %w", p.ID, err)
	}
	return nil
}

const providerByID = `select ` + providerCols + ` from metering.providers where provider_id=$1`

// Provider reads one provider.
func (s *Store) Provider(ctx context.Context, id string) (domain.Provider, error) {
	return scanProvider(s.Pool.QueryRow(ctx, providerByID, id))
}

// Provider reads one provider; forUpdate locks its row.
func (t *Tx) Provider(ctx context.Context, id string, forUpdate bool) (domain.Provider, error) {
	sql := providerByID
	if forUpdate {
		sql += ` for update`
	}
	return scanProvider(t.tx.QueryRow(ctx, sql, id))
}

// ListProviders pages through providers ordered by id, after the given id.
func (s *Store) ListProviders(ctx context.Context, tier, after string, limit int) ([]domain.Provider, error) {
	rows, err := s.Pool.Query(ctx, `select `+providerCols+` from metering.providers
		where provider_id > $1 and ($2 = '' or tier = $2) order by provider_id limit $3`, after, tier, limit)
	if err != nil {
		return nil, fmt.Errorf("list providers: %w", err)
	}
	defer rows.Close()
	var out []domain.Provider
	for rows.Next() {
		p, err := scanProvider(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

const renterCols = `renter_id, name, currency, credit_limit, status, closed_at, version, created_at, updated_at`

func scanRenter(row pgx.Row) (domain.Renter, error) {
	var r domain.Renter
	var closedAt *time.Time
	if err := row.Scan(&r.ID, &r.Name, &r.Currency, &r.CreditLimit, &r.Status, &closedAt, &r.Version, &r.CreatedAt, &r.UpdatedAt); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return r, apperr.ErrNotFound
		}
		return r, err
	}
	if closedAt != nil {
		r.ClosedAt = *closedAt
	}
	return r, nil
}

// nullTime is t, NULL when zero.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// InsertRenter inserts r unless its id exists; it reports whether it did.
func (t *Tx) InsertRenter(ctx context.Context, r domain.Renter) (bool, error) {
	tag, err := t.tx.Exec(ctx, `insert into metering.renters (`+renterCols+`)
		values ($1,$2,$3,$4,$5,$6,$7,$8,$9) on conflict (renter_id) do nothing`,
		r.ID, r.Name, r.Currency, r.CreditLimit, r.Status, nullTime(r.ClosedAt), r.Version, r.CreatedAt, r.UpdatedAt)
	if err != nil {
		return false, fmt.Errorf("insert renter %s: %w", r.ID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// UpdateRenter writes every mutable field of r.
func (t *Tx) UpdateRenter(ctx context.Context, r domain.Renter) error {
	_, err := t.tx.Exec(ctx, `update metering.renters set name=$2, credit_limit=$3, status=$4, closed_at=$5, version=$6, updated_at=$7
		where renter_id=$1`, r.ID, r.Name, r.CreditLimit, r.Status, nullTime(r.ClosedAt), r.Version, r.UpdatedAt)
	if err != nil {
		return fmt.Errorf("update renter %s: %w", r.ID, err)
	}
	return nil
}

const renterByID = `select ` + renterCols + ` from metering.renters where renter_id=$1`

// Renter reads one renter.
func (s *Store) Renter(ctx context.Context, id string) (domain.Renter, error) {
	return scanRenter(s.Pool.QueryRow(ctx, renterByID, id))
}

// Renter reads one renter; forUpdate locks its row.
func (t *Tx) Renter(ctx context.Context, id string, forUpdate bool) (domain.Renter, error) {
	sql := renterByID
	if forUpdate {
		sql += ` for update`
	}
	return scanRenter(t.tx.QueryRow(ctx, sql, id))
}

// ListRenters pages through renters ordered by id.
func (s *Store) ListRenters(ctx context.Context, after string, limit int) ([]domain.Renter, error) {
	rows, err := s.Pool.Query(ctx, `select `+renterCols+` from metering.renters where renter_id > $1 order by renter_id limit $2`, after, limit)
	if err != nil {
		return nil, fmt.Errorf("list renters: %w", err)
	}
	defer rows.Close()
	var out []domain.Renter
	for rows.Next() {
		r, err := scanRenter(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// PartiesOf loads the providers and renters named (for ingest enrichment).
func (s *Store) PartiesOf(ctx context.Context, providerIDs, renterIDs []string) (map[string]domain.Provider, map[string]domain.Renter, error) {
	provs := make(map[string]domain.Provider, len(providerIDs))
	rows, err := s.Pool.Query(ctx, `select `+providerCols+` from metering.providers where provider_id = any($1)`, providerIDs)
	if err != nil {
		return nil, nil, fmt.Errorf("load providers: %w", err)
	}
	for rows.Next() {
		p, err := scanProvider(rows)
		if err != nil {
			rows.Close()
			return nil, nil, err
		}
		provs[p.ID] = p
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	rents := make(map[string]domain.Renter, len(renterIDs))
	rows, err = s.Pool.Query(ctx, `select `+renterCols+` from metering.renters where renter_id = any($1)`, renterIDs)
	if err != nil {
		return nil, nil, fmt.Errorf("load renters: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		r, err := scanRenter(rows)
		if err != nil {
			return nil, nil, err
		}
		rents[r.ID] = r
	}
	return provs, rents, rows.Err()
}

// LeaseParties returns the parties each lease of leaseIDs has recorded
// usage for (usage_leases' key: one pair per lease, but for usage recorded
// before leases were held to one).
//
// Its statement is planned generically, in one round trip with the
// settings around it: a plan made for a batch's ~500 lease ids (Postgres's
// custom plans, a connection's first five runs) cost ~3 ms to make against
// ~0.5 ms to run (2026-12-05, psql on a table of 40 000 leases), 1.1-2.0 µs
// of Postgres CPU per event in the pipeline bench.
func (t *Tx) LeaseParties(ctx context.Context, leaseIDs []string) (map[string][]domain.LeaseParties, error) {
	out := map[string][]domain.LeaseParties{}
	b := &pgx.Batch{}
	b.Queue(`set local plan_cache_mode = force_generic_plan`)
	b.Queue(`select lease_id, provider_id, renter_id from metering.usage_leases where lease_id = any($1)`, leaseIDs).Query(func(rows pgx.Rows) error {
		var lease string
		var p domain.LeaseParties
		_, err := pgx.ForEachRow(rows, []any{&lease, &p.ProviderID, &p.RenterID}, func() error {
			out[lease] = append(out[lease], p)
			return nil
		})
		return err
	})
	b.Queue(`set local plan_cache_mode = default`)
	if err := t.tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("lease parties: %w", err)
	}
	return out, nil
}

// LockLeases locks each distinct lease's row of metering.lease_locks until
// the end of the transaction, writing the rows of leases locked for the
// first time, in one statement and in key order (so two ingests never
// deadlock on them): ingests of disjoint leases run in parallel, and the
// overlap check in InsertUsage sees every committed event of its leases.
// An ON CONFLICT DO UPDATE locks the row it meets even when its WHERE
// updates nothing; one inserting a lease another transaction has just
// inserted waits for that one to end.
//
// A row lock is kept in the row itself, where an advisory lock per lease
// took an entry of the cluster's shared lock table (migration
// metering/0011): a call of 5 000 events on as many leases took 5 000,
// and three such calls at once left every service of the cluster "out of
// shared memory".
func (t *Tx) LockLeases(ctx context.Context, leaseIDs []string) error {
	_, err := t.tx.Exec(ctx, `insert into metering.lease_locks (lease_id)
		select distinct l collate "C" from unnest($1::text[]) as l order by 1
		on conflict (lease_id) do update set lease_id = excluded.lease_id where false`, leaseIDs)
	if err != nil {
		return fmt.Errorf("lock leases: %w", err)
	}
	return nil
}

// overlapProbe finds a recorded event of lease x.lease_id overlapping
// [x.s, x.e); events last at most 24 h, so it is a short btree range scan.
const overlapProbe = `u.lease_id = x.lease_id and u.start_time < x.e
	and u.start_time > x.s - interval '24 hours' and u.end_time > x.s`

// lastBefore is the probe InsertUsage uses: a lease's recorded events never
// overlap each other, so ordered by start they are ordered by end too, and
// [x.s, x.e) overlaps one of them exactly when the last one starting before
// x.e ends after x.s. One backward step on (lease_id, start_time) per event,
// however many events the lease has (a NOT EXISTS over the range let the
// planner hash the whole table for every batch).
const lastBefore = `not exists (select 1 from (select u.end_time from metering.usage_events u
		where u.lease_id = x.lease_id and u.start_time < x.e order by u.start_time desc limit 1) as p
	where p.end_time > x.s)`

// hotLeases is the CTE "hot": the staged leases whose recorded time may
// overlap their staged events. It applies lastBefore's step once per lease,
// to the hull [min start, max end) of the lease's staged events: a
// recorded event overlapping one of them starts before the hull's end and
// ends after its start, so the last recorded event starting before the
// hull's end ends after the hull's start too (ordered by start, a lease's
// events are ordered by end). Only the events of a hot lease take
// lastBefore's step each: a lease reporting n events in one batch costs one
// index descent instead of n when nothing recorded is near (~17 % of the
// insert's CPU in a 5 000-event batch of 10-event leases).
const hotLeases = `hot as (select l.lease_id
	from (select lease_id, min(s) as s0, max(e) as e1 from pg_temp.usage_stage group by lease_id) as l
	where ` + hullNearRecorded + `)`

// hullNearRecorded is hotLeases' test of one lease l(lease_id, s0, e1):
// the last recorded event of the lease starting before the hull's end ends
// after its start.
const hullNearRecorded = `exists (select 1 from (select u.end_time from metering.usage_events u
		where u.lease_id = l.lease_id and u.start_time < l.e1 order by u.start_time desc limit 1) as p
	where p.end_time > l.s0)`

// InsertUsage inserts events, skipping any whose id exists or whose GPU
// time overlaps its lease's recorded time, and returns the ids it inserted.
// Call it after LockLeases, with events that do not overlap each other.
//
// The events are staged with one binary COPY into a temporary table
// (stageUsage) and inserted from there by one statement: against 13 array
// parameters of 5 000 elements each, the COPY stream is written here
// without an allocation per value, and the server reads it in small
// pieces instead of one large Bind. Rows go in in id order (staged in that
// order, read back by a sequential scan of the fresh table), so two
// concurrent ingests that share an event id under different leases wait on
// each other's unique key in one direction only (no deadlock).
//
// Most batches repeat no recorded id, so the insert is first tried without
// ON CONFLICT: its check of the primary key before each row (a second
// descent of the key and a speculative-insertion lock per row) cost ~15-20 %
// of the insert's CPU. The primary key still refuses any repeat; the
// batch's first repeated id sends the whole insert back to its savepoint
// and it runs again with ON CONFLICT (id) DO NOTHING.
//
// The usual batch needs none of that: no lease of it has recorded time
// near its events, and no id of it is recorded. So the leases are probed
// first (anyHot, one statement over the leases' hulls), and when none is
// hot the events are copied straight into usage_events in a savepoint
// (copyUsage): no staging table, and COPY writes a page of heap rows per
// WAL record. A recorded id fails the COPY on the primary key; the batch
// then goes the staged way above.
func (t *Tx) InsertUsage(ctx context.Context, evs []domain.Recorded) (map[string]bool, error) {
	if len(evs) == 0 {
		return map[string]bool{}, nil
	}
	order := idOrder(evs)
	hot, err := t.anyHot(ctx, evs)
	if err != nil {
		return nil, err
	}
	if !hot {
		copied, err := t.copyUsage(ctx, evs, order)
		if err != nil {
			return nil, err
		}
		if copied {
			inserted := make(map[string]bool, len(evs))
			for i := range evs {
				inserted[evs[i].ID] = true
			}
			return inserted, t.recordLeases(ctx, evs, inserted)
		}
	}
	inserted, err := t.insertStagedUsage(ctx, evs, order)
	if err != nil {
		return nil, err
	}
	return inserted, t.recordLeases(ctx, evs, inserted)
}

// insertStagedUsage stages evs and inserts those that overlap no recorded
// time of their lease and repeat no recorded id; it returns their ids.
func (t *Tx) insertStagedUsage(ctx context.Context, evs []domain.Recorded, order []int32) (map[string]bool, error) {
	if err := t.stageUsage(ctx, evs, order); err != nil {
		return nil, err
	}
	// The plain insert first, in a savepoint: a recorded id under another
	// lease or time (an exact repeat overlaps itself and is filtered out
	// before), or the same id from a concurrent ingest, fails it on the
	// primary key, and the insert runs again skipping recorded ids.
	sp, err := t.tx.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("insert usage: %w", err)
	}
	inserted, err := insertStaged(ctx, sp, "", len(evs))
	if pg.IsUniqueViolation(err) {
		if err := sp.Rollback(ctx); err != nil {
			return nil, fmt.Errorf("insert usage: %w", err)
		}
		return insertStaged(ctx, t.tx, "on conflict (id) do nothing", len(evs))
	}
	if err != nil {
		return nil, err
	}
	if err := sp.Commit(ctx); err != nil {
		return nil, fmt.Errorf("insert usage: %w", err)
	}
	return inserted, nil
}

// recordLeases writes the usage_leases rows the inserted events need (see
// migration metering/0010): a lease and party pair seen for the first time,
// or one whose events now start earlier or end on a later UTC day. The rows
// go in key order; two ingests of one lease are serialized before this by
// the batch's lease locks.
//
// The rows are first copied in, in a savepoint (copyLeases): the usual
// batch of a lease's first report has no row yet, and the upsert's ON
// CONFLICT (a second descent of the key and a speculative-insertion lock
// per row, its values bound as arrays) cost the server 10.9-12.7 µs per
// new lease in the pipeline bench, the COPY 7.0-8.8 (DEVELOPERS.md). A pair that
// has a row fails the COPY on the key, and the batch takes the upsert.
func (t *Tx) recordLeases(ctx context.Context, evs []domain.Recorded, inserted map[string]bool) error {
	idx := make(map[leasePair]int, len(evs)/4)
	var pairs []leasePair
	var first, lastDay []time.Time
	for i := range evs {
		e := &evs[i]
		if !inserted[e.ID] {
			continue
		}
		k, day := leasePair{e.LeaseID, e.RenterID, e.ProviderID}, utcDay(e.End)
		j, ok := idx[k]
		if !ok {
			idx[k] = len(pairs)
			pairs, first, lastDay = append(pairs, k), append(first, e.Start), append(lastDay, day)
			continue
		}
		if e.Start.Before(first[j]) {
			first[j] = e.Start
		}
		if day.After(lastDay[j]) {
			lastDay[j] = day
		}
	}
	if len(pairs) == 0 {
		return nil
	}
	byKey := make([]int, len(pairs))
	for i := range byKey {
		byKey[i] = i
	}
	slices.SortFunc(byKey, func(a, b int) int {
		return cmp.Or(strings.Compare(pairs[a].lease, pairs[b].lease), strings.Compare(pairs[a].renter, pairs[b].renter),
			strings.Compare(pairs[a].provider, pairs[b].provider))
	})
	if copied, err := t.copyLeases(ctx, pairs, first, lastDay, byKey); err != nil || copied {
		return err
	}
	n := len(pairs)
	leases, renters, providers := make([]string, n), make([]string, n), make([]string, n)
	starts, days := make([]time.Time, n), make([]time.Time, n)
	for i, j := range byKey {
		leases[i], renters[i], providers[i], starts[i], days[i] = pairs[j].lease, pairs[j].renter, pairs[j].provider, first[j], lastDay[j]
	}
	if _, err := t.tx.Exec(ctx, `insert into metering.usage_leases as l (lease_id, renter_id, provider_id, first_start, last_day)
		select * from unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::date[])
		on conflict (lease_id, renter_id, provider_id) do update
			set first_start = least(l.first_start, excluded.first_start), last_day = greatest(l.last_day, excluded.last_day)
			where excluded.first_start < l.first_start or excluded.last_day > l.last_day`,
		leases, renters, providers, starts, days); err != nil {
		return fmt.Errorf("record leases: %w", err)
	}
	return nil
}

// leasePair is a usage_leases key: a lease and its pair of parties.
type leasePair struct{ lease, renter, provider string }

// copyLeases copies in the usage_leases rows of pairs (with their first
// start and last day), in byKey's order, in a savepoint, and reports
// whether it did: a pair that has a row already fails it on the key, and
// the savepoint is rolled back for the upsert. Rows go in key order; the
// COPY stops at the first pair that has a row.
func (t *Tx) copyLeases(ctx context.Context, pairs []leasePair, first, lastDay []time.Time, byKey []int) (bool, error) {
	w := pg.NewCopyWriter(len(byKey) * leaseRowBytesEst)
	for _, j := range byKey {
		w.Row(5)
		w.Text(pairs[j].lease)
		w.Text(pairs[j].renter)
		w.Text(pairs[j].provider)
		w.Timestamptz(first[j])
		w.Date(lastDay[j])
	}
	copied, err := pg.CopyUnlessRepeated(ctx, t.tx, w.Done(),
		`copy metering.usage_leases (lease_id, renter_id, provider_id, first_start, last_day) from stdin (format binary)`)
	if err != nil {
		return false, fmt.Errorf("record leases: %w", err)
	}
	return copied, nil
}

// leaseRowBytesEst sizes a usage_leases row for the first allocation: 5
// fields of 4-byte lengths, three ids, a time and a date.
const leaseRowBytesEst = 2 + 5*4 + 3*16 + 8 + 4

// utcDay is t's UTC day, at midnight UTC (what a date column holds of it).
func utcDay(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// insertStaged inserts the staged events that overlap no recorded time of
// their lease (onConflict: what a recorded id does) and returns their ids.
func insertStaged(ctx context.Context, q pgx.Tx, onConflict string, n int) (map[string]bool, error) {
	rows, err := q.Query(ctx, `with `+hotLeases+`
		insert into metering.usage_events
		(id, lease_id, provider_id, renter_id, gpu_model, gpu_count, start_time, end_time, region, workload, cycle_id, status, received_at)
		select x.id, x.lease_id, x.provider_id, x.renter_id, x.gpu_model, x.gpu_count, x.s, x.e, x.region, x.workload, x.cycle_id, x.status, x.received_at
		from pg_temp.usage_stage x
		where x.lease_id not in (select lease_id from hot) or `+lastBefore+`
		`+onConflict+` returning id`)
	if err != nil {
		return nil, fmt.Errorf("insert usage: %w", err)
	}
	inserted := make(map[string]bool, n)
	for rows.Next() {
		var x string
		if err := rows.Scan(&x); err != nil {
			rows.Close()
			return nil, err
		}
		inserted[x] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("insert usage: %w", err)
	}
	return inserted, nil
}

// usageStageDDL is the session's staging table for InsertUsage: temporary
// (no WAL, local buffers), emptied at every commit, created once per
// connection ("if not exists" makes it one catalogue lookup after that).
const usageStageDDL = `create temporary table if not exists usage_stage (
	id text, lease_id text, provider_id text, renter_id text, gpu_model text, gpu_count int,
	s timestamptz, e timestamptz, region text, workload text, cycle_id text, status text, received_at timestamptz)
	on commit delete rows`

// anyHot reports whether a lease of evs may have recorded time overlapping
// its events in evs: hullNearRecorded, on hulls computed here and sent as
// three arrays of one element per lease.
func (t *Tx) anyHot(ctx context.Context, evs []domain.Recorded) (bool, error) {
	idx := make(map[string]int, len(evs)/4)
	var leases []string
	var s0, e1 []time.Time
	for i := range evs {
		e := &evs[i]
		j, ok := idx[e.LeaseID]
		if !ok {
			idx[e.LeaseID] = len(leases)
			leases, s0, e1 = append(leases, e.LeaseID), append(s0, e.Start), append(e1, e.End)
			continue
		}
		if e.Start.Before(s0[j]) {
			s0[j] = e.Start
		}
		if e.End.After(e1[j]) {
			e1[j] = e.End
		}
	}
	var hot bool
	err := t.tx.QueryRow(ctx, `select exists (select 1
		from unnest($1::text[], $2::timestamptz[], $3::timestamptz[]) as l(lease_id, s0, e1)
		where `+hullNearRecorded+`)`, leases, s0, e1).Scan(&hot)
	if err != nil {
		return false, fmt.Errorf("probe leases: %w", err)
	}
	return hot, nil
}

// copyUsage copies evs (in order) into usage_events in a savepoint; false,
// with the savepoint rolled back, when an id is recorded already.
func (t *Tx) copyUsage(ctx context.Context, evs []domain.Recorded, order []int32) (bool, error) {
	copied, err := pg.CopyUnlessRepeated(ctx, t.tx, usageCopy(evs, order), `copy metering.usage_events
		(id, lease_id, provider_id, renter_id, gpu_model, gpu_count, start_time, end_time, region, workload, cycle_id, status, received_at)
		from stdin (format binary)`)
	if err != nil {
		return false, fmt.Errorf("copy usage: %w", err)
	}
	return copied, nil
}

// idOrder is the permutation of evs sorting them by id (sorting a
// permutation, not the large events).
func idOrder(evs []domain.Recorded) []int32 {
	order := make([]int32, len(evs))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int { return strings.Compare(evs[a].ID, evs[b].ID) })
	return order
}

// stageUsage empties the staging table (a delete: TRUNCATE would make a new
// file every time) and COPYs evs into it, in order.
func (t *Tx) stageUsage(ctx context.Context, evs []domain.Recorded, order []int32) error {
	if _, err := t.tx.Exec(ctx, usageStageDDL+`; delete from pg_temp.usage_stage`); err != nil {
		return fmt.Errorf("stage usage: %w", err)
	}
	if _, err := t.tx.Conn().PgConn().CopyFrom(ctx, bytes.NewReader(usageCopy(evs, order)), `copy pg_temp.usage_stage from stdin (format binary)`); err != nil {
		return fmt.Errorf("stage usage: %w", err)
	}
	return nil
}

// usageRowBytesEst sizes a usage row for the first allocation: 13 fields
// of 4-byte lengths, three timestamps, an int and ~120 bytes of ids and
// names.
const usageRowBytesEst = 2 + 13*4 + 3*8 + 4 + 120

// usageCopy is evs in order as a binary COPY stream of usage_events'
// columns (the staging table's too).
func usageCopy(evs []domain.Recorded, order []int32) []byte {
	w := pg.NewCopyWriter(len(evs) * usageRowBytesEst)
	for _, o := range order {
		e := &evs[o]
		w.Row(13)
		w.Text(e.ID)
		w.Text(e.LeaseID)
		w.Text(e.ProviderID)
		w.Text(e.RenterID)
		w.Text(e.GPUModel)
		w.Int4(e.GPUCount)
		w.Timestamptz(e.Start)
		w.Timestamptz(e.End)
		w.Text(e.Region)
		w.Text(e.Workload)
		w.Text(e.CycleID)
		w.Text(e.Status)
		w.Timestamptz(e.ReceivedAt)
	}
	return w.Done()
}

// Existing returns the recorded events among ids, by id.
func (t *Tx) Existing(ctx context.Context, ids []string) (map[string]domain.Event, error) {
	rows, err := t.tx.Query(ctx, `select id, lease_id, provider_id, renter_id, gpu_model, gpu_count, start_time, end_time, region, workload
		from metering.usage_events where id = any($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("existing usage ids: %w", err)
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (domain.Event, error) {
		var e domain.Event
		err := r.Scan(&e.ID, &e.LeaseID, &e.ProviderID, &e.RenterID, &e.GPUModel, &e.GPUCount, &e.Start, &e.End, &e.Region, &e.Workload)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("existing usage ids: %w", err)
	}
	out := make(map[string]domain.Event, len(got))
	for _, e := range got {
		out[e.ID] = e
	}
	return out, nil
}

// Overlapping returns, for each event, the id of the earliest recorded event
// of its lease whose GPU time overlaps it ("" when none).
func (t *Tx) Overlapping(ctx context.Context, evs []domain.Event) (map[string]string, error) {
	ids, lease := make([]string, len(evs)), make([]string, len(evs))
	start, end := make([]time.Time, len(evs)), make([]time.Time, len(evs))
	for i, e := range evs {
		ids[i], lease[i], start[i], end[i] = e.ID, e.LeaseID, e.Start, e.End
	}
	rows, err := t.tx.Query(ctx, `select x.id, f.id
		from unnest($1::text[], $2::text[], $3::timestamptz[], $4::timestamptz[]) as x(id, lease_id, s, e)
		cross join lateral (select u.id from metering.usage_events u where `+overlapProbe+`
			order by u.start_time, u.id limit 1) as f`, ids, lease, start, end)
	if err != nil {
		return nil, fmt.Errorf("find overlaps: %w", err)
	}
	defer rows.Close()
	out := make(map[string]string, len(evs))
	for rows.Next() {
		var a, b string
		if err := rows.Scan(&a, &b); err != nil {
			return nil, err
		}
		out[a] = b
	}
	return out, rows.Err()
}

// ListUsage pages through usage ordered by (start_time, id): by the lease
// index when a lease is named (usageOfLeaseSQL), else through the party's
// leases (partyUsageSQL).
//
// Every bound is given, an open one as -infinity or infinity and no cursor
// as -infinity and the empty id, never "$4 is null or start_time >= $4": Postgres
// keeps a generic plan of a prepared statement after its fifth run on a
// connection when the generic plan's estimate is the cheaper, as it is here,
// and the generic plan of that form cannot bound the lease index's scan, so
// every page read all of each lease's events (TestListUsagePageReadsAPage).
// And each lease's rows come from the lease index in start_time order, at
// most a page of them with those tied on the last start (FETCH FIRST … WITH
// TIES), so no plan needs a sort of them: ordered by (start_time, id), the
// generic plan for a lease of 87 600 events among 2 000 short ones sorted
// all 51 360 of its rows after the cursor (21 ms, where this form read 100
// in 0.3 ms; a scratch database, not the test's data, whose plans use the
// index's order either way).
func (s *Store) ListUsage(ctx context.Context, f app.UsageFilter) ([]domain.Recorded, error) {
	from := pgtype.Timestamptz{Time: f.From, Valid: true}
	if f.From.IsZero() {
		from = pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	}
	to := pgtype.Timestamptz{Time: f.To, Valid: true}
	if f.To.IsZero() {
		to = pgtype.Timestamptz{InfinityModifier: pgtype.Infinity, Valid: true}
	}
	after := pgtype.Timestamptz{Time: f.AfterStart, Valid: true}
	if f.AfterID == "" {
		after = pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	}
	var rows pgx.Rows
	var err error
	switch {
	case f.LeaseID == "" && f.RenterID != "":
		rows, err = s.Pool.Query(ctx, partyUsageSQL("renter_id", "provider_id"), f.RenterID, f.ProviderID, lowerDay(f), from, to, after, f.AfterID, f.Limit)
	case f.LeaseID == "" && f.ProviderID != "":
		rows, err = s.Pool.Query(ctx, partyUsageSQL("provider_id", "renter_id"), f.ProviderID, f.RenterID, lowerDay(f), from, to, after, f.AfterID, f.Limit)
	default:
		rows, err = s.Pool.Query(ctx, usageOfLeaseSQL, f.LeaseID, f.RenterID, f.ProviderID, from, to, after, f.AfterID, f.Limit)
	}
	if err != nil {
		return nil, fmt.Errorf("list usage: %w", err)
	}
	defer rows.Close()
	var out []domain.Recorded
	for rows.Next() {
		var r domain.Recorded
		if err := rows.Scan(&r.ID, &r.LeaseID, &r.ProviderID, &r.RenterID, &r.GPUModel, &r.GPUCount, &r.Start, &r.End,
			&r.Region, &r.Workload, &r.CycleID, &r.Status, &r.ReceivedAt); err != nil {
			return nil, err
		}
		r.Start, r.End, r.ReceivedAt = r.Start.UTC(), r.End.UTC(), r.ReceivedAt.UTC()
		out = append(out, r)
	}
	return out, rows.Err()
}

// usageColumns are a listed usage row's columns, in ListUsage's scan order.
const usageColumns = `u.id, u.lease_id, u.provider_id, u.renter_id, u.gpu_model, u.gpu_count, u.start_time, u.end_time,
	u.region, u.workload, u.cycle_id, u.status, u.received_at`

// leasePageSQL is the first rows of one lease (lease, an expression) of
// the page: its events that parties holds of in [$4, $5) after the cursor
// ($6, $7), from the lease index in start_time order, $8 of them and those
// tied on the last start.
func leasePageSQL(lease, parties string) string {
	return `select * from metering.usage_events u
			where u.lease_id = ` + lease + ` and ` + parties + `
			  and u.start_time >= $4 and u.start_time < $5 and (u.start_time, u.id) > ($6, $7)
			order by u.start_time fetch first ($8) rows with ties`
}

// usageOfLeaseSQL lists one lease's usage ($1; of the renter $2 and the
// provider $3 when not empty).
var usageOfLeaseSQL = `select ` + usageColumns + `
	from (` + leasePageSQL("$1", "($2 = '' or u.renter_id = $2) and ($3 = '' or u.provider_id = $3)") + `) u
	order by u.start_time, u.id limit $8`

// partyUsageSQL lists a party's usage (by, $1; the other party too when $2
// is not empty) through usage_leases: each of the party's leases that has
// ended on or after the page's lower bound day ($3) gives its first rows of
// the page from the lease index, and the page is the least of them. A row
// of usage_leases names its lease's events of exactly that pair of parties.
func partyUsageSQL(by, other string) string {
	return `select ` + usageColumns + `
		from metering.usage_leases l
		cross join lateral (` + leasePageSQL("l.lease_id", "u.renter_id = l.renter_id and u.provider_id = l.provider_id") + `) u
		where l.` + by + ` = $1 and ($2 = '' or l.` + other + ` = $2) and l.last_day >= $3::date
		  and l.first_start < $5
		order by u.start_time, u.id limit $8`
}

// lowerDay is the earliest UTC day a lease must have ended on to hold a row
// of the page: an event starting at or after t ends after t, so on t's day
// or later.
func lowerDay(f app.UsageFilter) time.Time {
	t := f.From
	if f.AfterID != "" && f.AfterStart.After(t) {
		t = f.AfterStart
	}
	if t.IsZero() {
		return time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	return utcDay(t)
}
