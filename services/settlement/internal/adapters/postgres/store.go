// Package postgres holds settlement's Postgres store (schema "settlement").
package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/split"
	"github.com/gpubill/gpubill/services/settlement/internal/app"
	"github.com/gpubill/gpubill/services/settlement/internal/domain"
)

// Schema is settlement's Postgres schema.
const Schema = "settlement"

// Store reads and writes settlement's tables.
type Store struct {
	Pool    *pgxpool.Pool
	batches *pg.Batches // the provider workflows' prepare and finalize statements
}

// NewStore returns the store on pool. A cycle's close runs hundreds of
// provider workflows at once, each with a prepare and a finalize statement
// of its own: they go in shared batches (pg.Batches), a round trip and a
// commit per group; a provider settled alone (a release) waits the linger
// twice.
func NewStore(pool *pgxpool.Pool) *Store {
	return &Store{Pool: pool, batches: pg.NewBatches(pool, Schema, pg.BatchMax, pg.BatchLinger)}
}

var (
	_ app.Store   = (*Store)(nil)
	_ app.Queries = (*Store)(nil)
)

// UpsertTiers applies party updates (newer versions win) inside tx.
func (s *Store) UpsertTiers(ctx context.Context, tx pgx.Tx, rows []domain.ProviderTier) error {
	for _, r := range rows {
		if _, err := tx.Exec(ctx, `insert into settlement.providers (provider_id, tier, version, updated_at)
			values ($1, $2, $3, now())
			on conflict (provider_id) do update set tier = excluded.tier, version = excluded.version, updated_at = now()
			where settlement.providers.version <= excluded.version`, r.ProviderID, r.Tier, r.Version); err != nil {
			return fmt.Errorf("upsert tier of %s: %w", r.ProviderID, err)
		}
	}
	return nil
}

// EnsureCycle records a cycle as open unless it is known, and returns its status.
func (s *Store) EnsureCycle(ctx context.Context, cy cycles.Cycle) (string, error) {
	var status string
	err := s.Pool.QueryRow(ctx, `with ins as (
			insert into settlement.cycles (cycle_id, status, starts_at, ends_at, closes_at)
			values ($1, 'open', $2, $3, $4) on conflict (cycle_id) do nothing returning status)
		select status from ins union all select status from settlement.cycles where cycle_id = $1 limit 1`,
		cy.ID, cy.Start, cy.End, cy.Closes).Scan(&status)
	if err != nil {
		return "", fmt.Errorf("ensure cycle %s: %w", cy.ID, err)
	}
	return status, nil
}

// BeginClose moves an open cycle to closing (once) and queues
// settlement.cycle.closed.{cycle} in the same transaction. It reports whether
// this call closed it.
func (s *Store) BeginClose(ctx context.Context, cycle, reason string, now time.Time) (bool, error) {
	msg, err := cycleClosed(cycle, now)
	if err != nil {
		return false, err
	}
	var changed bool
	err = pg.InTx(ctx, s.Pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `update settlement.cycles set status = 'closing', closed_at = $2, close_reason = $3
			where cycle_id = $1 and status = 'open'`, cycle, now, reason)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return nil
		}
		changed = true
		return outbox.Add(ctx, tx, Schema, msg)
	})
	if err != nil {
		return false, fmt.Errorf("begin close of %s: %w", cycle, err)
	}
	return changed, nil
}

// CycleStatus returns a cycle's status and whether its snapshot is complete.
func (s *Store) CycleStatus(ctx context.Context, cycle string) (status string, snapshotDone bool, err error) {
	err = s.Pool.QueryRow(ctx, `select status, snapshot_done from settlement.cycles where cycle_id = $1`, cycle).Scan(&status, &snapshotDone)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, fmt.Errorf("cycle %s: %w", cycle, apperr.ErrNotFound)
	}
	return status, snapshotDone, err
}

// SnapshotBalances records gross rows (idempotently: the first snapshot
// wins), each with its provider's tier at the snapshot (standard for a
// provider no party.updated has named: DESIGN §5's default) and that
// tier's commission rate in rates (none for a tier rates lacks: the
// settlement then refuses it). The cycle is
// split at that tier however long its provider waits: read again at each
// attempt, a tier changed before a retry (or while the provider was held)
// asked the tax service for another rate on the withholding it had
// recorded, refused for good, or split a cycle's currencies at two rates.
func (s *Store) SnapshotBalances(ctx context.Context, cycle string, rows []domain.Balance, rates map[string]decimal.Decimal) error {
	if len(rows) == 0 {
		return nil
	}
	providers := make([]string, len(rows))
	currencies := make([]string, len(rows))
	amounts := make([]decimal.Decimal, len(rows))
	for i, r := range rows {
		providers[i], currencies[i], amounts[i] = r.ProviderID, r.Currency, r.Amount
	}
	tiers, tierRates := make([]string, 0, len(rates)), make([]decimal.Decimal, 0, len(rates))
	for t, r := range rates {
		tiers, tierRates = append(tiers, t), append(tierRates, r)
	}
	// A provider with a row already (its other currency, on an earlier
	// page) takes that row's tier and rate: a tier change between two pages
	// split its currencies at two rates.
	_, err := s.Pool.Exec(ctx, `insert into settlement.settlements (cycle_id, provider_id, currency, gross, tier, commission_rate)
		select $1, t.p, t.c, t.a, coalesce(ex.tier, pr.tier, $5), case when ex.tier is null then r.rate else ex.commission_rate end
		from unnest($2::text[], $3::text[], $4::numeric[]) as t(p, c, a)
		left join lateral (select st.tier, st.commission_rate from settlement.settlements st
			where st.cycle_id = $1 and st.provider_id = t.p order by st.currency limit 1) ex on true
		left join settlement.providers pr on pr.provider_id = t.p
		left join unnest($6::text[], $7::numeric[]) as r(tier, rate) on r.tier = coalesce(pr.tier, $5)
		on conflict do nothing`, cycle, providers, currencies, amounts, split.TierStandard, tiers, tierRates)
	if err != nil {
		return fmt.Errorf("snapshot %d balances of %s: %w", len(rows), cycle, err)
	}
	return nil
}

// MarkSnapshotDone records that every balance of the cycle is snapshotted,
// then analyzes settlement.settlements: the snapshot has just added the
// cycle's rows, which the table's statistics (if any) do not know of yet,
// and planned without them NextProviders sorted every row of the cycle
// after its cursor for each page (a cycle's paging grew with the square of
// its size). Analyzing samples at most 30 000 rows, once per cycle.
func (s *Store) MarkSnapshotDone(ctx context.Context, cycle string) error {
	if _, err := s.Pool.Exec(ctx, `update settlement.cycles set snapshot_done = true where cycle_id = $1`, cycle); err != nil {
		return err
	}
	if _, err := s.Pool.Exec(ctx, `analyze settlement.settlements`); err != nil {
		return fmt.Errorf("analyze the snapshot of %s: %w", cycle, err)
	}
	return nil
}

// nextProvidersSQL pages through a cycle's providers in order.
const nextProvidersSQL = `select distinct provider_id from settlement.settlements
	where cycle_id = $1 and provider_id > $2 order by provider_id limit $3`

// NextProviders returns up to limit providers of the cycle after after, in order.
func (s *Store) NextProviders(ctx context.Context, cycle, after string, limit int) ([]string, error) {
	rows, err := s.Pool.Query(ctx, nextProvidersSQL, cycle, after, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// providerStatesSQL reads the state of each provider of $2 in cycle $1 that
// is held or settled: one index lookup per provider (a lateral aggregate on
// (cycle_id, provider_id)). The page polls it every 50 ms for the providers
// in flight; written as "cycle_id = $1 and provider_id = any($2)", the
// planner (without statistics, or misled by them) scanned every row of the
// cycle and filtered: 360 ms a poll over a 100 000-provider cycle against
// 2 ms, so a cycle's polls cost grew with its size.
const providerStatesSQL = `select p.id, s.state
	from unnest($2::text[]) as p(id) cross join lateral (
		select case when bool_and(st.status = 'settled') then 'settled'
			when bool_or(st.status = 'held') then 'held' else '' end as state
		from settlement.settlements st where st.cycle_id = $1 and st.provider_id = p.id) s
	where s.state <> ''`

// ProviderStates returns the state of each of the providers that is held
// or settled in the cycle (the others are pending).
func (s *Store) ProviderStates(ctx context.Context, cycle string, providers []string) (map[string]string, error) {
	rows, err := s.Pool.Query(ctx, providerStatesSQL, cycle, providers)
	if err != nil {
		return nil, err
	}
	states := make(map[string]string, len(providers))
	var id, st string
	_, err = pgx.ForEachRow(rows, []any{&id, &st}, func() error {
		if st != domain.ProviderPending {
			states[id] = st
		}
		return nil
	})
	return states, err
}

// CompleteCycle marks a closing cycle settled once every settlement of it
// is settled, and reports whether the cycle is settled. A provider held, or
// whose settlement failed, keeps its cycle closing (it was marked settled,
// its money still in pending, and no figure showed it).
func (s *Store) CompleteCycle(ctx context.Context, cycle string, now time.Time) (bool, error) {
	var status string
	err := s.Pool.QueryRow(ctx, `with done as (
			update settlement.cycles set status = 'settled', settled_at = $2
			where cycle_id = $1 and status = 'closing' and snapshot_done
			  and not exists (select 1 from settlement.settlements where cycle_id = $1 and status <> 'settled')
			returning status)
		select coalesce((select status from done), (select status from settlement.cycles where cycle_id = $1), '')`, cycle, now).Scan(&status)
	if err != nil {
		return false, fmt.Errorf("complete cycle %s: %w", cycle, err)
	}
	return status == domain.CycleSettled, nil
}

// prepareSQL reads a provider's hold, tier (its rows', fixed at the
// snapshot; the provider's for rows snapshotted without one), when the
// cycle was closed and rows, and marks the rows
// held or back to pending to match the hold (the update runs in a
// data-modifying WITH; the select computes the statuses it writes, since it
// reads the snapshot from before the update).
const prepareSQL = `with hold as (
		select coalesce((select held from settlement.holds where cycle_id = $1 and provider_id = $2), false) as held),
	marked as (
		update settlement.settlements st set status = case when hold.held then 'held' else 'pending' end,
			begun_at = case when hold.held then null else coalesce(st.begun_at, now()) end
		from hold
		where st.cycle_id = $1 and st.provider_id = $2 and st.status <> 'settled'
		  and (st.status <> case when hold.held then 'held' else 'pending' end or (not hold.held and st.begun_at is null)))
	select hold.held, coalesce(nullif(st.tier, ''), (select tier from settlement.providers where provider_id = $2), ''),
		st.commission_rate, (select closed_at from settlement.cycles where cycle_id = $1), st.currency, st.gross,
		case when st.status = 'settled' then 'settled' when hold.held then 'held' else 'pending' end
	from hold left join settlement.settlements st on st.cycle_id = $1 and st.provider_id = $2
	order by st.currency`

// holdLockSQL takes the lock a provider's prepare and a hold of it in a
// cycle take first, so that each reads what the other committed: a hold
// either commits before the prepare reads it, or finds the settlement begun
// and is refused.
const holdLockSQL = `select pg_advisory_xact_lock(hashtext('gpubill.settlement.hold'), hashtext($1 || '/' || $2))`

// Prepare reads a provider's hold, tier, when the cycle was closed (zero
// while open) and rows, and marks the rows held
// or back to pending to match the hold, and begun when not held (a hold is
// refused from then on): one statement (prepareSQL) after the hold's lock
// (holdLockSQL), sent with other providers' in a shared batch, one
// transaction.
func (s *Store) Prepare(ctx context.Context, cycle, provider string) (bool, string, decimal.NullDecimal, time.Time, []domain.PreparedItem, error) {
	// The callback writes r, read only after a nil error: after an error
	// it may still run, with the group's batch (pg.Batches.Do).
	var r struct {
		held     bool
		tier     string
		rate     decimal.NullDecimal
		closedAt *time.Time
		items    []domain.PreparedItem
	}
	err := s.batches.Do(ctx, func(b *pgx.Batch) {
		r.held, r.tier, r.rate, r.closedAt, r.items = false, "", decimal.NullDecimal{}, nil, nil
		b.Queue(holdLockSQL, cycle, provider)
		b.Queue(prepareSQL, cycle, provider).Query(func(rows pgx.Rows) error {
			var (
				currency, status *string
				gross, rate      decimal.NullDecimal
				tier             string
			)
			_, err := pgx.ForEachRow(rows, []any{&r.held, &tier, &rate, &r.closedAt, &currency, &gross, &status}, func() error {
				if r.tier == "" { // the first row's tier: one snapshot, one tier
					r.tier = tier
				}
				if rate.Valid && !r.rate.Valid { // one snapshot: the same rate on every currency
					r.rate = rate
				}

				if currency != nil {
					r.items = append(r.items, domain.PreparedItem{Currency: *currency, Gross: gross.Decimal, Status: *status})
				}
				return nil
			})
			return err
		})
	})
	if err != nil {
		return false, "", decimal.NullDecimal{}, time.Time{}, nil, fmt.Errorf("prepare %s in %s: %w", provider, cycle, err)
	}
	var closedAt time.Time
	if r.closedAt != nil {
		closedAt = *r.closedAt
	}
	return r.held, r.tier, r.rate, closedAt, r.items, nil
}

// finalizeSQL marks a row settled with its split (once) and queues the
// outbox message ($17–$19) only if it did.
var finalizeSQL = `with settled as (
		update settlement.settlements set status = 'settled', tier = $4,
		commission_rate = $5, commission = $6, tax_withheld = $7, net = $8, jurisdiction = $9,
		rule_set = $10, rule_version = $11, withholding_id = $12, transaction_id = $13,
		sweep_transaction_id = $14, lines = $15, settled_at = $16
		where cycle_id = $1 and provider_id = $2 and currency = $3 and status <> 'settled'
		returning 1)
	` + outbox.InsertInto(Schema) + `
	select $17, $18, $19 where exists (select 1 from settled)
	on conflict (id) do nothing`

// Finalize marks a row settled with its split (once) and, in the same
// statement, queues settlement.settled.{provider} in settlement's outbox.
func (s *Store) Finalize(ctx context.Context, st domain.Settled, now time.Time) error {
	msg, err := providerSettled(st)
	if err != nil {
		return err
	}
	if err := msg.Check(); err != nil {
		return err
	}
	lines, err := json.Marshal(st.Lines)
	if err != nil {
		return err
	}
	// One statement: the event is queued only if this call settled the row
	// (a replay finds it settled, and the event went out with it). Sent
	// with other providers' in a shared batch, so it runs again alone if
	// another's fails.
	err = s.batches.Do(ctx, func(b *pgx.Batch) {
		b.Queue(finalizeSQL,
			st.CycleID, st.ProviderID, st.Split.Currency, st.Tier, st.Split.CommissionRate, st.Split.Commission,
			st.Split.Tax, st.Split.Net, st.Split.Jurisdiction, st.RuleSet, st.RuleVersion, st.WithholdingID,
			st.TransactionID, st.SweepID, lines, now, msg.ID, msg.Subject, msg.Payload)
	})
	if err != nil {
		return fmt.Errorf("finalize %s %s %s: %w", st.CycleID, st.ProviderID, st.Split.Currency, err)
	}
	return nil
}

// unsweptCols lists the settled statements with a commission and no sweep
// transaction (their sweep deferred); UnsweptCommission adds the keyset's
// bounds and reads them oldest first (settlements_unswept). The bounds are
// compared by PostgreSQL, in the order it sorts by (the database's
// collation), never in Go.
const (
	unsweptCols = `select cycle_id, provider_id, currency, commission, settled_at from settlement.settlements
		where status = 'settled' and commission > 0 and sweep_transaction_id = ''`
	unsweptKey   = `(settled_at, cycle_id, provider_id, currency)`
	unsweptOrder = ` order by settled_at, cycle_id, provider_id, currency`
)

// UnsweptCommission lists up to limit settled statements with a commission
// and no sweep transaction (their sweep deferred), oldest first
// (settlements_unswept), after the statement after when it is set and up
// to and with the statement through when it is set.
func (s *Store) UnsweptCommission(ctx context.Context, after, through *domain.Unswept, limit int) ([]domain.Unswept, error) {
	q := unsweptCols
	args := []any{limit}
	bound := func(op string, u *domain.Unswept) {
		n := len(args)
		q += fmt.Sprintf(` and %s %s ($%d, $%d, $%d, $%d)`, unsweptKey, op, n+1, n+2, n+3, n+4)
		args = append(args, u.SettledAt, u.CycleID, u.ProviderID, u.Currency)
	}
	if after != nil {
		bound(">", after)
	}
	if through != nil {
		bound("<=", through)
	}
	rows, err := s.Pool.Query(ctx, q+unsweptOrder+` limit $1`, args...)
	if err != nil {
		return nil, fmt.Errorf("unswept commission: %w", err)
	}
	us, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (domain.Unswept, error) {
		var u domain.Unswept
		err := r.Scan(&u.CycleID, &u.ProviderID, &u.Currency, &u.Commission, &u.SettledAt)
		return u, err
	})
	if err != nil {
		return nil, fmt.Errorf("unswept commission: %w", err)
	}
	return us, nil
}

// RecordSweep names the sweep transaction on a settled statement that had
// none (a replay, or another run's, finds it named and changes nothing).
func (s *Store) RecordSweep(ctx context.Context, u domain.Unswept, sweepID string) error {
	if _, err := s.Pool.Exec(ctx, `update settlement.settlements set sweep_transaction_id = $4
		where cycle_id = $1 and provider_id = $2 and currency = $3 and status = 'settled' and sweep_transaction_id = ''`,
		u.CycleID, u.ProviderID, u.Currency, sweepID); err != nil {
		return fmt.Errorf("record sweep of %s %s %s: %w", u.CycleID, u.ProviderID, u.Currency, err)
	}
	return nil
}

// TakeSweepPosition makes the caller's run the one that moves the hourly
// commission sweep's shared position (commission_sweep_position, one row:
// its run number goes up by one, so a run that took it before is
// superseded) and answers the run's number and the position (nil: from the
// oldest). The row is made again if it is missing.
func (s *Store) TakeSweepPosition(ctx context.Context) (int64, *domain.Unswept, error) {
	var (
		run                       int64
		settled                   *time.Time
		cycle, provider, currency *string
	)
	if err := s.Pool.QueryRow(ctx, `insert into settlement.commission_sweep_position as p (id, run) values (true, 1)
		on conflict (id) do update set run = p.run + 1, updated_at = now()
		returning run, settled_at, cycle_id, provider_id, currency`).Scan(&run, &settled, &cycle, &provider, &currency); err != nil {
		return 0, nil, fmt.Errorf("take the commission sweep position: %w", err)
	}
	if settled == nil || cycle == nil || provider == nil || currency == nil { // the table's check: all or none
		return run, nil, nil
	}
	return run, &domain.Unswept{SettledAt: *settled, CycleID: *cycle, ProviderID: *provider, Currency: *currency}, nil
}

// MoveSweepPosition records at (nil: from the oldest) as the commission
// sweep's position if run still holds it (no later run took it), and
// answers whether it did.
func (s *Store) MoveSweepPosition(ctx context.Context, run int64, at *domain.Unswept) (bool, error) {
	var (
		settled                   *time.Time
		cycle, provider, currency *string
	)
	if at != nil {
		settled, cycle, provider, currency = &at.SettledAt, &at.CycleID, &at.ProviderID, &at.Currency
	}
	tag, err := s.Pool.Exec(ctx, `update settlement.commission_sweep_position
		set settled_at = $2, cycle_id = $3, provider_id = $4, currency = $5, updated_at = now()
		where id and run = $1`, run, settled, cycle, provider, currency)
	if err != nil {
		return false, fmt.Errorf("move the commission sweep position (run %d): %w", run, err)
	}
	return tag.RowsAffected() == 1, nil
}

const cycleCols = `cycle_id, status, starts_at, ends_at, closes_at, closed_at, settled_at`

func scanCycle(r pgx.CollectableRow) (domain.Cycle, error) {
	var c domain.Cycle
	return c, r.Scan(&c.ID, &c.Status, &c.StartsAt, &c.EndsAt, &c.ClosesAt, &c.ClosedAt, &c.SettledAt)
}

// GetCycle returns a cycle with its totals, or ErrNotFound.
func (s *Store) GetCycle(ctx context.Context, id string) (domain.Cycle, error) {
	rows, err := s.Pool.Query(ctx, `select `+cycleCols+` from settlement.cycles where cycle_id = $1`, id)
	if err != nil {
		return domain.Cycle{}, err
	}
	c, err := pgx.CollectExactlyOneRow(rows, scanCycle)
	if errors.Is(err, pgx.ErrNoRows) {
		return domain.Cycle{}, fmt.Errorf("cycle %s: %w", id, apperr.ErrNotFound)
	}
	if err != nil {
		return domain.Cycle{}, err
	}
	if err := s.totals(ctx, []*domain.Cycle{&c}); err != nil {
		return domain.Cycle{}, err
	}
	return c, nil
}

// ListCycles lists cycles newest first, optionally by status, before a cycle id.
func (s *Store) ListCycles(ctx context.Context, status, before string, limit int) ([]domain.Cycle, error) {
	rows, err := s.Pool.Query(ctx, `select `+cycleCols+` from settlement.cycles
		where ($1 = '' or status = $1) and ($2 = '' or cycle_id < $2) order by cycle_id desc limit $3`, status, before, limit)
	if err != nil {
		return nil, err
	}
	cs, err := pgx.CollectRows(rows, scanCycle)
	if err != nil {
		return nil, err
	}
	ptrs := make([]*domain.Cycle, len(cs))
	for i := range cs {
		ptrs[i] = &cs[i]
	}
	return cs, s.totals(ctx, ptrs)
}

// totals sums each cycle's settled rows per currency (gross and providers
// count every row, settled or still to settle; the gross of those still to
// settle is apart, so the parts add up to the gross).
func (s *Store) totals(ctx context.Context, cs []*domain.Cycle) error {
	if len(cs) == 0 {
		return nil
	}
	ids := make([]string, len(cs))
	byID := make(map[string]*domain.Cycle, len(cs))
	for i, c := range cs {
		ids[i] = c.ID
		byID[c.ID] = c
	}
	rows, err := s.Pool.Query(ctx, `select cycle_id, currency, sum(gross), coalesce(sum(commission), 0),
			coalesce(sum(tax_withheld), 0), coalesce(sum(net), 0), count(*),
			coalesce(sum(gross) filter (where net is null), 0), count(*) filter (where net is not null)
		from settlement.settlements where cycle_id = any($1) group by cycle_id, currency order by cycle_id, currency`, ids)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var t domain.Total
		if err := rows.Scan(&id, &t.Currency, &t.Gross, &t.Commission, &t.Tax, &t.Net, &t.Providers, &t.GrossUnsettled, &t.ProvidersSettled); err != nil {
			return err
		}
		byID[id].Totals = append(byID[id].Totals, t)
	}
	return rows.Err()
}

// SetHold holds or releases a provider in a cycle. Holding a provider
// already settled in the cycle, or whose settlement has begun (Prepare found
// it not held), is refused: the hold could no longer stop the settlement.
func (s *Store) SetHold(ctx context.Context, h domain.Hold) error {
	return pg.InTx(ctx, s.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, holdLockSQL, h.CycleID, h.ProviderID); err != nil {
			return err
		}
		if h.Held {
			var settled, begun bool
			if err := tx.QueryRow(ctx, `select coalesce(bool_or(status = 'settled'), false), coalesce(bool_or(begun_at is not null), false)
				from settlement.settlements where cycle_id = $1 and provider_id = $2`, h.CycleID, h.ProviderID).Scan(&settled, &begun); err != nil {
				return err
			}
			if settled {
				return fmt.Errorf("provider %s is already settled in %s: %w", h.ProviderID, h.CycleID, apperr.ErrPrecondition)
			}
			if begun {
				return fmt.Errorf("provider %s's settlement of %s has begun (its net may be posted to available already); "+
					"hold its payouts instead (PUT /v1/providers/%s/payout-hold): %w", h.ProviderID, h.CycleID, h.ProviderID, apperr.ErrPrecondition)
			}
		}
		_, err := tx.Exec(ctx, `insert into settlement.holds (cycle_id, provider_id, held, reason, updated_at)
			values ($1, $2, $3, $4, $5) on conflict (cycle_id, provider_id)
			do update set held = excluded.held, reason = excluded.reason, updated_at = excluded.updated_at`,
			h.CycleID, h.ProviderID, h.Held, h.Reason, h.UpdatedAt)
		return err
	})
}

// ListStatements lists a provider's settled rows, newest cycle first, in
// (cycle_id desc, currency) order; after, when set, is the last statement of
// the previous page (a cycle has one per currency, so a page may end inside
// a cycle).
func (s *Store) ListStatements(ctx context.Context, provider, cycle string, after *domain.StatementPos, limit int) ([]domain.Statement, error) {
	var afterCycle, afterCurrency string
	if after != nil {
		afterCycle, afterCurrency = after.CycleID, after.Currency
	}
	rows, err := s.Pool.Query(ctx, `select cycle_id, provider_id, tier, currency, gross, commission_rate, commission,
			tax_withheld, net, jurisdiction, rule_set, rule_version, withholding_id, transaction_id,
			sweep_transaction_id, lines, settled_at
		from settlement.settlements
		where provider_id = $1 and status = 'settled' and ($2 = '' or cycle_id = $2)
			and ($3 = '' or cycle_id < $3 or (cycle_id = $3 and currency > $4))
		order by cycle_id desc, currency limit $5`, provider, cycle, afterCycle, afterCurrency, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (domain.Statement, error) {
		var st domain.Statement
		var lines []byte
		sp := &st.Split
		err := r.Scan(&st.CycleID, &st.ProviderID, &st.Tier, &sp.Currency, &sp.Gross, &sp.CommissionRate, &sp.Commission,
			&sp.Tax, &sp.Net, &sp.Jurisdiction, &st.RuleSet, &st.RuleVersion, &st.WithholdingID, &st.TransactionID,
			&st.SweepID, &lines, &st.CreatedAt)
		if err != nil {
			return st, err
		}
		return st, json.Unmarshal(lines, &st.Lines)
	})
}

// UnsettledCycles lists the cycles not yet settled with their status (for
// start-up and the daily opener).
func (s *Store) UnsettledCycles(ctx context.Context) ([]app.CycleInfo, error) {
	rows, err := s.Pool.Query(ctx, `select cycle_id, status from settlement.cycles where status <> 'settled' order by cycle_id`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[app.CycleInfo])
}
