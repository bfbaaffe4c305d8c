// Package postgres holds the tax service's Postgres store (schema "tax").
package postgres

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/services/tax/internal/app"
	"github.com/gpubill/gpubill/services/tax/internal/domain"
)

// Schema is the tax service's Postgres schema.
const Schema = "tax"

// Store reads and writes the tax tables.
type Store struct {
	Pool    *pgxpool.Pool
	batches *pg.Batches // the withholdings' statements
}

// NewStore returns the store on pool. A cycle's close asks for hundreds of
// providers' withholdings at once (settlement's provider workflows): each
// withholding's statements (the recorded one and the profile, the rule in
// force, the insert) go in shared batches (pg.Batches), a round trip and a
// commit per group.
func NewStore(pool *pgxpool.Pool) *Store {
	return &Store{Pool: pool, batches: pg.NewBatches(pool, Schema, pg.BatchMax, pg.BatchLinger)}
}

// UpsertProfiles applies party updates (newer versions win) inside tx.
func (s *Store) UpsertProfiles(ctx context.Context, tx pgx.Tx, ps []domain.Profile) error {
	for _, p := range ps {
		if _, err := tx.Exec(ctx, `insert into tax.profiles (provider_id, tax_profile, jurisdiction, version, updated_at)
			values ($1, $2, $3, $4, now()) on conflict (provider_id) do update
			set tax_profile = excluded.tax_profile, jurisdiction = excluded.jurisdiction, version = excluded.version, updated_at = now()
			where tax.profiles.version <= excluded.version`, p.ProviderID, p.TaxProfile, p.Jurisdiction, p.Version); err != nil {
			return fmt.Errorf("upsert tax profile of %s: %w", p.ProviderID, err)
		}
	}
	return nil
}

// Profile returns a provider's profile; ok is false when none is known.
func (s *Store) Profile(ctx context.Context, provider string) (domain.Profile, bool, error) {
	p := domain.Profile{ProviderID: provider}
	err := s.Pool.QueryRow(ctx, `select tax_profile, jurisdiction, version from tax.profiles where provider_id = $1`, provider).
		Scan(&p.TaxProfile, &p.Jurisdiction, &p.Version)
	if errors.Is(err, pgx.ErrNoRows) {
		return p, false, nil
	}
	return p, err == nil, err
}

// SetSelection records a rule set selection for a scope, in force from
// `from` (earlier selections stay, for the cycles that ended before it),
// and answers the time it is in force from. A selection of the rule set
// already in force for the scope (the same request sent again) records
// nothing and answers that selection's time: recorded again, it would
// move the day the rule set took effect. The zero time: in force since
// always.
func (s *Store) SetSelection(ctx context.Context, scope, ruleSet string, from time.Time) (time.Time, error) {
	var at *time.Time
	err := s.Pool.QueryRow(ctx, `with latest as (select rule_set, effective_from from tax.rule_selections
			where scope = $1 order by effective_from desc limit 1),
		ins as (insert into tax.rule_selections (scope, rule_set, effective_from)
			select $1, $2, $3 where not exists (select 1 from latest where rule_set = $2)
			on conflict (scope, effective_from) do update set rule_set = excluded.rule_set, updated_at = now()
			returning effective_from)
		select nullif(coalesce((select effective_from from ins), (select effective_from from latest)), '-infinity')`,
		scope, ruleSet, from).Scan(&at)
	if at == nil {
		// A selection made before selections had a day (migration tax/0006
		// gave it -infinity, which a time.Time cannot hold: a 500): in
		// force since always, the zero time.
		return time.Time{}, err
	}
	return *at, err
}

const ruleCols = `rule_set, rule_version, jurisdiction, effective_from, effective_until, is_default, description`

func scanRule(r pgx.CollectableRow) (domain.Rule, error) {
	var x domain.Rule
	return x, r.Scan(&x.RuleSet, &x.Version, &x.Jurisdiction, &x.EffectiveFrom, &x.EffectiveUntil, &x.IsDefault, &x.Description)
}

// ruleAtSQL chooses the rule set ($1, else the one selected for the
// scopes $2 in force at $3: of the first scope in $2's order that has a
// selection in force, its latest) and its version in force at $3; one row,
// its rule columns null when no version is in force.
const ruleAtSQL = `with chosen as (
		select coalesce(nullif($1, ''), (select rule_set from tax.rule_selections where scope = any($2::text[]) and effective_from <= $3
			order by array_position($2::text[], scope), effective_from desc limit 1), '') as name)
	select chosen.name, r.rule_set, coalesce(r.rule_version, ''), coalesce(r.jurisdiction, ''),
		coalesce(r.effective_from, 'epoch'), r.effective_until, coalesce(r.is_default, false), coalesce(r.description, '')
	from chosen left join lateral (
		select ` + ruleCols + ` from tax.rules
		where (rule_set = chosen.name or (chosen.name = '' and is_default)) and effective_from <= $3 and (effective_until is null or effective_until > $3)
		order by effective_from desc, rule_version desc limit 1) r on true`

// RuleAt returns the version in force at instant at of ruleSet, or when
// ruleSet is "" of the rule set selected for the provider (when one is
// named), else for its jurisdiction, else for each jurisdiction that one
// belongs to (CN-BJ, then CN: domain.JurisdictionLevels), else the default
// rule set; at each level the selection in force at at. ErrPrecondition
// when none is in force. One statement (a withholding per provider and
// currency reads it), sent with concurrent ones in a shared batch.
func (s *Store) RuleAt(ctx context.Context, ruleSet, provider, jurisdiction string, at time.Time) (domain.Rule, error) {
	var (
		chosen string
		r      domain.Rule
		set    *string
	)
	var scopes []string
	if provider != "" {
		scopes = append(scopes, "provider:"+provider)
	}
	if jurisdiction != "" {
		for _, j := range domain.JurisdictionLevels(jurisdiction) {
			scopes = append(scopes, "jurisdiction:"+j)
		}
	}
	err := s.batches.Do(ctx, func(b *pgx.Batch) {
		b.Queue(ruleAtSQL, ruleSet, scopes, at).QueryRow(func(row pgx.Row) error {
			return row.Scan(&chosen, &set, &r.Version, &r.Jurisdiction, &r.EffectiveFrom, &r.EffectiveUntil, &r.IsDefault, &r.Description)
		})
	})
	if err != nil {
		return domain.Rule{}, err
	}
	if set == nil {
		return domain.Rule{}, fmt.Errorf("no version of tax rule set %q in force at %s: %w", chosen, at.Format(time.RFC3339), apperr.ErrPrecondition)
	}
	r.RuleSet = *set
	return r, nil
}

// Rules lists rule versions: of a rule set ("" = any) that apply in a
// jurisdiction ("" = any): its own, those of each jurisdiction it belongs
// to (CN's in CN-BJ) and those of none.
func (s *Store) Rules(ctx context.Context, ruleSet, jurisdiction string) ([]domain.Rule, error) {
	var levels []string
	if jurisdiction != "" {
		levels = append(domain.JurisdictionLevels(jurisdiction), "")
	}
	rows, err := s.Pool.Query(ctx, `select `+ruleCols+` from tax.rules
		where ($1 = '' or rule_set = $1) and ($2::text[] is null or jurisdiction = any($2::text[])) order by rule_set, effective_from, rule_version`,
		ruleSet, levels)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanRule)
}

const whCols = `withholding_id, idempotency_key, provider_id, cycle_id, currency, gross, commission_rate, commission,
	taxable_base, tax_withheld, net, tax_profile, jurisdiction, rule_set, rule_version, certificate_id, created_at`

func scanWH(r pgx.CollectableRow) (domain.Withholding, error) {
	var w domain.Withholding
	return w, r.Scan(&w.ID, &w.IdempotencyKey, &w.ProviderID, &w.CycleID, &w.Currency, &w.Gross, &w.CommissionRate, &w.Commission,
		&w.TaxableBase, &w.Tax, &w.Net, &w.TaxProfile, &w.Jurisdiction, &w.RuleSet, &w.RuleVersion, &w.CertificateID, &w.CreatedAt)
}

// WithholdingByKey returns the withholding recorded under an idempotency key.
func (s *Store) WithholdingByKey(ctx context.Context, key string) (domain.Withholding, bool, error) {
	rows, err := s.Pool.Query(ctx, `select `+whCols+` from tax.withholdings where idempotency_key = $1`, key)
	if err != nil {
		return domain.Withholding{}, false, err
	}
	w, err := pgx.CollectExactlyOneRow(rows, scanWH)
	if errors.Is(err, pgx.ErrNoRows) {
		return domain.Withholding{}, false, nil
	}
	return w, err == nil, err
}

// Recorded returns the withholding recorded under key (found) and the
// provider's tax profile (ok): two statements, sent with concurrent ones in
// a shared batch.
func (s *Store) Recorded(ctx context.Context, key, provider string) (domain.Withholding, bool, domain.Profile, bool, error) {
	// The callbacks write r, read only after a nil error: after an error
	// they may still run, with the group's batch (pg.Batches.Do).
	var r struct {
		w         domain.Withholding
		found, ok bool
		p         domain.Profile
	}
	err := s.batches.Do(ctx, func(b *pgx.Batch) {
		r.w, r.found, r.p, r.ok = domain.Withholding{}, false, domain.Profile{ProviderID: provider}, false
		b.Queue(`select `+whCols+` from tax.withholdings where idempotency_key = $1`, key).Query(func(rows pgx.Rows) error {
			ws, err := pgx.CollectRows(rows, scanWH)
			if len(ws) == 1 {
				r.w, r.found = ws[0], true
			}
			return err
		})
		b.Queue(`select tax_profile, jurisdiction, version from tax.profiles where provider_id = $1`, provider).Query(func(rows pgx.Rows) error {
			n, err := pgx.ForEachRow(rows, []any{&r.p.TaxProfile, &r.p.Jurisdiction, &r.p.Version}, func() error { return nil })
			r.ok = n.RowsAffected() == 1
			return err
		})
	})
	if err != nil {
		return domain.Withholding{}, false, domain.Profile{}, false, err
	}
	return r.w, r.found, r.p, r.ok, nil
}

// insertWithholdingSQL records a withholding unless its key is taken, and
// returns it when it did.
const insertWithholdingSQL = `insert into tax.withholdings (withholding_id, idempotency_key, provider_id, cycle_id, currency,
		gross, commission_rate, commission, taxable_base, tax_withheld, net, tax_profile, jurisdiction, rule_set, rule_version,
		certificate_id, created_at)
	values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17) on conflict (idempotency_key) do nothing
	returning ` + whCols

// InsertWithholding records w unless its key is taken, and returns the
// withholding recorded under the key (the original on a replay). The insert
// goes with concurrent ones in a shared batch.
func (s *Store) InsertWithholding(ctx context.Context, w domain.Withholding) (domain.Withholding, error) {
	var (
		got      domain.Withholding
		inserted bool
	)
	err := s.batches.Do(ctx, func(b *pgx.Batch) {
		got, inserted = domain.Withholding{}, false
		b.Queue(insertWithholdingSQL,
			w.ID, w.IdempotencyKey, w.ProviderID, w.CycleID, w.Currency, w.Gross, w.CommissionRate, w.Commission, w.TaxableBase,
			w.Tax, w.Net, w.TaxProfile, w.Jurisdiction, w.RuleSet, w.RuleVersion, w.CertificateID, w.CreatedAt).Query(func(rows pgx.Rows) error {
			ws, err := pgx.CollectRows(rows, scanWH)
			if len(ws) == 1 {
				got, inserted = ws[0], true
			}
			return err
		})
	})
	if err == nil && !inserted { // the key was taken: answer the original
		got, _, err = s.WithholdingByKey(ctx, w.IdempotencyKey)
	}
	if err != nil {
		return domain.Withholding{}, fmt.Errorf("record withholding %s: %w", w.IdempotencyKey, err)
	}
	return got, nil
}

// Withholdings lists a provider's withholdings, newest cycle first, in
// (cycle_id desc, currency) order, after (afterCycle, afterCurrency) when
// afterCycle is set.
func (s *Store) Withholdings(ctx context.Context, provider, cycle, afterCycle, afterCurrency string, limit int) ([]domain.Withholding, error) {
	rows, err := s.Pool.Query(ctx, `select `+whCols+` from tax.withholdings
		where provider_id = $1 and ($2 = '' or cycle_id = $2)
			and ($3 = '' or cycle_id < $3 or (cycle_id = $3 and currency > $4))
		order by cycle_id desc, currency limit $5`, provider, cycle, afterCycle, afterCurrency, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanWH)
}

const remCols = `remittance_id, period, jurisdiction, currency, amount, status, transaction_id, created_at, remitted_at,
	reversed_by, reversed_at`

func scanRem(r pgx.CollectableRow) (domain.Remittance, error) {
	var x domain.Remittance
	return x, r.Scan(&x.ID, &x.Period, &x.Jurisdiction, &x.Currency, &x.Amount, &x.Status, &x.TransactionID, &x.CreatedAt, &x.RemittedAt,
		&x.ReversedBy, &x.ReversedAt)
}

// PlanRemittances assigns every unremitted withholding recorded before end
// (the instant the period's month ends in the tax zone) whose settlement
// was posted (MarkPosted) to a remittance of the period per jurisdiction and
// currency (once), and returns the period's remittances. A period filed
// already takes only what a reversed remittance of it gave back
// (planRemittancesSQL).
//
// A remittance holds the withholdings it was made with, and its amount is
// their sum, both from one statement's snapshot (planRemittancesSQL): a
// withholding that commits later (its time is taken before its insert,
// which may wait in a shared batch) is never attached to a remittance
// already planned, which may have been paid already. It waits for the next
// period's remittance, which takes every unremitted withholding recorded
// before that period's end.
//
// A remittance reversed (MarkReversed) does not count: the period's next
// plan makes another of its jurisdiction and currency, with the
// withholdings the reversal gave back, under the id of the first with
// -{n} added (rem-2026-02-CN-CNY-2 after rem-2026-02-CN-CNY): the id is the
// ledger key, and the reversed one's would answer the reversed transaction.
func (s *Store) PlanRemittances(ctx context.Context, f app.Fence, period string, end, now time.Time) ([]domain.Remittance, error) {
	err := pg.InTx(ctx, s.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `select pg_advisory_xact_lock(hashtext('gpubill.tax.remit'))`); err != nil {
			return err
		}
		if err := checkFence(ctx, tx, f); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, planRemittancesSQL, period, end, now)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("plan remittances of %s: %w", period, err)
	}
	return s.Remittances(ctx, app.RemittanceFilter{Period: period})
}

// planRemittancesSQL makes the period's ($1) remittances that do not exist
// yet (or exist reversed only), each of the unremitted, posted withholdings
// recorded before $2 in its jurisdiction and currency, and attaches exactly
// those to it. A month already filed (its run recorded, or a remittance of
// it made, or of a later month: periods are YYYY-MM, text order is time
// order) takes only the withholdings a reversed remittance of it gave
// back (released_from): a late one (posted after the filing) waits for the
// first month filed after it, as a tax authority takes it in the next
// filing; a re-run of a filed month made a new remittance of it for them,
// and a reversed one was paid again with them. A later month's filing took
// every withholding of the month posted by then, so the month is filed too:
// a month before tax/0008 (its run never recorded) where nothing was owed,
// or one whose run never happened, read open, and a run of it by hand filed
// a late withholding under it, long past. The n-th remittance of a period, jurisdiction and currency
// (the n−1 before it reversed) has the id of the first with -{n} added; a
// currency is three letters, so no other's id can be it.
const planRemittancesSQL = `with fresh as (
		select w.withholding_id, w.jurisdiction, w.currency, w.tax_withheld from tax.withholdings w
		where w.remittance_id is null and w.created_at < $2 and w.settlement_tx_id is not null
		  and not exists (select 1 from tax.remittances r
			where r.period = $1 and r.jurisdiction = w.jurisdiction and r.currency = w.currency and r.status <> 'reversed')
		  and (w.released_from in (select r.remittance_id from tax.remittances r where r.period = $1 and r.status = 'reversed')
			or not (exists (select 1 from tax.remittance_runs rr where rr.period >= $1)
				or exists (select 1 from tax.remittances r where r.period >= $1)))),
	made as (
		insert into tax.remittances (remittance_id, period, jurisdiction, currency, amount, status, created_at)
		select 'rem-' || $1 || '-' || jurisdiction || '-' || currency || coalesce('-' || nullif((select count(*) + 1 from tax.remittances r
				where r.period = $1 and r.jurisdiction = fresh.jurisdiction and r.currency = fresh.currency), 1)::text, ''),
			$1, jurisdiction, currency, sum(tax_withheld), 'pending', $3
		from fresh group by jurisdiction, currency
		on conflict (period, jurisdiction, currency) where status <> 'reversed' do nothing
		returning remittance_id, jurisdiction, currency)
	update tax.withholdings w set remittance_id = made.remittance_id
	from fresh join made on made.jurisdiction = fresh.jurisdiction and made.currency = fresh.currency
	where w.withholding_id = fresh.withholding_id and w.remittance_id is null`

// Unremitted returns, in id order after `after`, at most limit unremitted
// withholdings recorded before end.
func (s *Store) Unremitted(ctx context.Context, end time.Time, after string, limit int) ([]domain.Withholding, error) {
	rows, err := s.Pool.Query(ctx, `select `+whCols+` from tax.withholdings
		where remittance_id is null and created_at < $2 and withholding_id > $1
		order by withholding_id limit $3`, after, end, limit)
	if err != nil {
		return nil, fmt.Errorf("unremitted withholdings: %w", err)
	}
	return pgx.CollectRows(rows, scanWH)
}

// Outstanding implements app.Store (the partial index withholdings_unremitted
// holds exactly the rows it counts).
func (s *Store) Outstanding(ctx context.Context, end time.Time) (int, error) {
	var n int
	if err := s.Pool.QueryRow(ctx, `select count(*) from tax.withholdings where remittance_id is null and created_at < $1`, end).Scan(&n); err != nil {
		return 0, fmt.Errorf("outstanding withholdings before %s: %w", end.Format(time.RFC3339), err)
	}
	return n, nil
}

// MarkPosted records each unremitted withholding's (by id) settlement
// transaction ("": none).
func (s *Store) MarkPosted(ctx context.Context, f app.Fence, txByWithholding map[string]string) error {
	if len(txByWithholding) == 0 {
		return nil
	}
	ids := slices.Sorted(maps.Keys(txByWithholding))
	txs := make([]string, len(ids))
	for i, id := range ids {
		txs[i] = txByWithholding[id]
	}
	// Under the remittance runs' lock, as PlanRemittances: two runs side by
	// side (the schedule and finance's POST, a client's retry) updated the
	// same withholdings in the orders of two Go maps and deadlocked, one
	// run a 500.
	err := pg.InTx(ctx, s.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `select pg_advisory_xact_lock(hashtext('gpubill.tax.remit'))`); err != nil {
			return err
		}
		if err := checkFence(ctx, tx, f); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `update tax.withholdings w set settlement_tx_id = nullif(p.tx, '')
			from unnest($1::text[], $2::text[]) as p(id, tx)
			where w.withholding_id = p.id and w.remittance_id is null
			  and w.settlement_tx_id is distinct from nullif(p.tx, '')`, ids, txs)
		return err
	})
	if err != nil {
		return fmt.Errorf("mark withholdings posted: %w", err)
	}
	return nil
}

// runLockPoll is how long a remittance run or reversal check waiting for
// another sleeps between two tries of the runs' lock.
const runLockPoll = 50 * time.Millisecond

// LockRuns implements app.Store: the session advisory lock
// gpubill.tax.remit.run on a connection of its own, kept until unlock. It
// is tried every runLockPoll until it is free or ctx ends, never waited for
// inside pg_advisory_lock (a statement blocked there holds a snapshot, which
// create index concurrently waits for: pg.Migrate's lockMigrations); between
// tries no connection is held. The connection holding it is idle outside
// any transaction while the run asks the ledger. unlock releases it; a
// connection whose unlock fails is closed, which ends its session and the
// lock with it.
//
// That session may end while the run goes on (its connection killed,
// idle_session_timeout, the network): another replica's run then takes the
// lock. Each taking draws the next token of tax.remittance_run_fence (the
// fence returned), and each write of a run checks its token in its own
// transaction (checkFence): the taking's update waits for a write holding
// the row, and a write after it finds a later token and fails with
// app.ErrRunsLockLost. A run that lost the lock writes nothing once the
// next has taken it, and the next reads everything it wrote before.
func (s *Store) LockRuns(ctx context.Context) (app.Fence, func(), error) {
	unlock, err := pg.SessionLock{Pool: s.Pool, Key: "gpubill.tax.remit.run"}.Lock(ctx, runLockPoll)
	if err != nil {
		return 0, nil, fmt.Errorf("remittance runs' lock (another tax remittance run): %w", err)
	}
	var token int64
	if err := s.Pool.QueryRow(ctx, `update tax.remittance_run_fence set token = token + 1 returning token`).Scan(&token); err != nil {
		unlock()
		return 0, nil, fmt.Errorf("remittance runs' fence: %w", err)
	}
	return app.Fence(token), unlock, nil
}

// checkFence fails with app.ErrRunsLockLost unless f is the latest taking
// of the runs' lock, and holds the fence's row (share) until tx ends: a
// later taking waits for tx (LockRuns).
func checkFence(ctx context.Context, tx pgx.Tx, f app.Fence) error {
	var token int64
	if err := tx.QueryRow(ctx, `select token from tax.remittance_run_fence for share`).Scan(&token); err != nil {
		return fmt.Errorf("remittance runs' fence: %w", err)
	}
	if app.Fence(token) != f {
		return fmt.Errorf("fence %d, the lock taken since as %d: %w", f, token, app.ErrRunsLockLost)
	}
	return nil
}

// MarkRemitted records the ledger transaction of a remittance, if f is
// still the runs' latest fence.
func (s *Store) MarkRemitted(ctx context.Context, f app.Fence, id, txID string, at time.Time) error {
	err := pg.InTx(ctx, s.Pool, func(tx pgx.Tx) error {
		if err := checkFence(ctx, tx, f); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `update tax.remittances set status = 'remitted', transaction_id = $2, reference = $1, remitted_at = $3
			where remittance_id = $1 and status = 'pending'`, id, txID, at)
		return err
	})
	if err != nil {
		return fmt.Errorf("mark remittance %s remitted: %w", id, err)
	}
	return nil
}

// RecordRun implements app.Store, if f is still the runs' latest fence.
func (s *Store) RecordRun(ctx context.Context, f app.Fence, period string, startedAt, completedAt time.Time, remittances, notPosted int) error {
	err := pg.InTx(ctx, s.Pool, func(tx pgx.Tx) error {
		if err := checkFence(ctx, tx, f); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `insert into tax.remittance_runs (period, started_at, completed_at, remittances, not_posted)
			values ($1, $2, $3, $4, $5) on conflict (period) do nothing`, period, startedAt, completedAt, remittances, notPosted)
		return err
	})
	if err != nil {
		return fmt.Errorf("record remittance run of %s: %w", period, err)
	}
	return nil
}

// Remittances lists remittances by period, jurisdiction and currency ("" = any).
func (s *Store) Remittances(ctx context.Context, f app.RemittanceFilter) ([]domain.Remittance, error) {
	// Newest period first, then jurisdiction, currency and id (a period's
	// jurisdiction and currency may have reversed remittances besides the
	// one that is not): the page after a remittance is what sorts after its
	// four.
	var afterPeriod, afterJurisdiction, afterCurrency, afterID string
	if f.After != nil {
		afterPeriod, afterJurisdiction, afterCurrency, afterID = f.After.Period, f.After.Jurisdiction, f.After.Currency, f.After.ID
	}
	limit := int64(f.Limit)
	if limit <= 0 {
		limit = math.MaxInt64
	}
	rows, err := s.Pool.Query(ctx, `select `+remCols+` from tax.remittances
		where ($1 = '' or period = $1) and ($2 = '' or jurisdiction = $2) and ($3 = '' or currency = $3)
		  and ($4 = '' or period < $4 or (period = $4 and (jurisdiction, currency, remittance_id) > ($5, $6, $8)))
		order by period desc, jurisdiction, currency, remittance_id limit $7`,
		f.Period, f.Jurisdiction, f.Currency, afterPeriod, afterJurisdiction, afterCurrency, limit, afterID)
	if err != nil {
		return nil, fmt.Errorf("list remittances: %w", err)
	}
	return pgx.CollectRows(rows, scanRem)
}

// RemittedUpTo returns, in id order after `after`, at most limit remittances
// of periods up to period (YYYY-MM: text order is time order) remitted
// with a ledger transaction (an amount of zero posts none).
func (s *Store) RemittedUpTo(ctx context.Context, period, after string, limit int) ([]domain.Remittance, error) {
	rows, err := s.Pool.Query(ctx, `select `+remCols+` from tax.remittances
		where status = 'remitted' and transaction_id <> '' and period <= $1 and remittance_id > $2
		order by remittance_id limit $3`, period, after, limit)
	if err != nil {
		return nil, fmt.Errorf("remitted remittances up to %s: %w", period, err)
	}
	return pgx.CollectRows(rows, scanRem)
}

// MarkReversed records that a reversal (the ledger transaction reversedBy)
// undid a remitted remittance, found at at, and gives its withholdings
// back (unremitted: the next plan of its period takes those still posted),
// in one transaction under the remittance runs' lock. It reports whether it
// did: false when the remittance is not remitted (another run marked it).
func (s *Store) MarkReversed(ctx context.Context, f app.Fence, id, reversedBy string, at time.Time) (bool, error) {
	var marked bool
	err := pg.InTx(ctx, s.Pool, func(tx pgx.Tx) error {
		marked = false
		if _, err := tx.Exec(ctx, `select pg_advisory_xact_lock(hashtext('gpubill.tax.remit'))`); err != nil {
			return err
		}
		if err := checkFence(ctx, tx, f); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `update tax.remittances set status = 'reversed', reversed_by = $2, reversed_at = $3
			where remittance_id = $1 and status = 'remitted'`, id, reversedBy, at)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		if _, err := tx.Exec(ctx, `update tax.withholdings set remittance_id = null, released_from = $1 where remittance_id = $1`, id); err != nil {
			return err
		}
		marked = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("mark remittance %s reversed: %w", id, err)
	}
	return marked, nil
}

// ReversedUnplanned lists the periods before period, oldest first, that
// hold a reversed remittance and no other of its jurisdiction and currency.
func (s *Store) ReversedUnplanned(ctx context.Context, period string) ([]string, error) {
	rows, err := s.Pool.Query(ctx, `select distinct r.period from tax.remittances r
		where r.status = 'reversed' and r.period < $1
		  and not exists (select 1 from tax.remittances o where o.period = r.period and o.jurisdiction = r.jurisdiction
			and o.currency = r.currency and o.status <> 'reversed')
		order by r.period`, period)
	if err != nil {
		return nil, fmt.Errorf("periods of reversed remittances before %s: %w", period, err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// PendingBefore lists the remittances of periods before period still
// pending, oldest first (periods are YYYY-MM: text order is time order).
func (s *Store) PendingBefore(ctx context.Context, period string) ([]domain.Remittance, error) {
	rows, err := s.Pool.Query(ctx, `select `+remCols+` from tax.remittances
		where status = 'pending' and period < $1 order by period, jurisdiction, currency`, period)
	if err != nil {
		return nil, fmt.Errorf("pending remittances before %s: %w", period, err)
	}
	return pgx.CollectRows(rows, scanRem)
}

// ReportPage implements app.Store.
func (s *Store) ReportPage(ctx context.Context, remittanceID, afterProvider string, limit int) ([]domain.ReportLine, bool, error) {
	var found bool
	if err := s.Pool.QueryRow(ctx, `select exists (select 1 from tax.remittances where remittance_id = $1)`, remittanceID).Scan(&found); err != nil {
		return nil, false, fmt.Errorf("remittance %s: %w", remittanceID, err)
	}
	if !found {
		return nil, false, nil
	}
	rows, err := s.Pool.Query(ctx, `select r.remittance_id, r.period, w.jurisdiction, w.currency, w.provider_id, sum(w.tax_withheld), count(*)
		from tax.withholdings w join tax.remittances r on r.remittance_id = w.remittance_id
		where w.remittance_id = $1 and w.provider_id > $2 group by 1, 2, 3, 4, 5 order by 5 limit $3`, remittanceID, afterProvider, limit)
	if err != nil {
		return nil, true, fmt.Errorf("report lines of remittance %s: %w", remittanceID, err)
	}
	lines, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (domain.ReportLine, error) {
		var l domain.ReportLine
		return l, r.Scan(&l.RemittanceID, &l.Period, &l.Jurisdiction, &l.Currency, &l.ProviderID, &l.Tax, &l.Count)
	})
	return lines, true, err
}

// Report implements app.Store.
func (s *Store) Report(ctx context.Context, remittanceIDs []string, limit int) ([]domain.ReportLine, error) {
	rows, err := s.Pool.Query(ctx, `select r.remittance_id, r.period, w.jurisdiction, w.currency, w.provider_id, sum(w.tax_withheld), count(*)
		from tax.withholdings w join tax.remittances r on r.remittance_id = w.remittance_id
		where w.remittance_id = any($1) group by 1, 2, 3, 4, 5
		order by array_position($1, r.remittance_id), 5 limit $2`, remittanceIDs, limit)
	if err != nil {
		return nil, fmt.Errorf("report of remittances: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (domain.ReportLine, error) {
		var l domain.ReportLine
		return l, r.Scan(&l.RemittanceID, &l.Period, &l.Jurisdiction, &l.Currency, &l.ProviderID, &l.Tax, &l.Count)
	})
}

// ReportCount implements app.Store: the lines counted, none built (the
// index withholdings_remittance_provider).
func (s *Store) ReportCount(ctx context.Context, remittanceIDs []string) (int, error) {
	var n int
	if err := s.Pool.QueryRow(ctx, `select count(*) from (select distinct remittance_id, provider_id from tax.withholdings
		where remittance_id = any($1)) l`, remittanceIDs).Scan(&n); err != nil {
		return 0, fmt.Errorf("count report lines of remittances: %w", err)
	}
	return n, nil
}
