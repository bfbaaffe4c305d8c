package postgres

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/pg"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// RenterStore is the renters' read model (ledger.renters): the ledger's
// inbox and UpsertRenters in one transaction, then, in it, lease control
// evaluated again for the wallets it has of the renters updated (lc; nil:
// none): a credit limit or currency that reached the ledger after a charge
// had stopped a renter within its limit left it stopped until the wallet
// moved again. A closed renter's wallet in its own currency is evaluated
// even when lease control has no record of it yet: a renter closed before
// its first charge may have GPUs running. It takes the renters' locks
// (lockRenters) before it stores them, as every evaluation does before it
// reads them.
func RenterStore(pool *pgxpool.Pool, lc *app.LeaseControl, webhooks bool) outbox.ReadModelStore[domain.RenterLimit] {
	upsert := func(ctx context.Context, tx pgx.Tx, rs []domain.RenterLimit) error {
		ids := make([]string, len(rs))
		for i, r := range rs {
			ids[i] = r.RenterID
		}
		if lc != nil {
			if err := lockRenters(ctx, tx, ids); err != nil {
				return err
			}
		}
		if err := UpsertRenters(ctx, tx, rs); err != nil || lc == nil {
			return err
		}
		rows, err := tx.Query(ctx, `select renter_id, currency from ledger.lease_control where renter_id = any($1)`, ids)
		if err != nil {
			return fmt.Errorf("renters' lease control: %w", err)
		}
		keys, err := pgx.CollectRows(rows, pgx.RowToStructByPos[domain.WalletKey])
		if err != nil {
			return fmt.Errorf("renters' lease control: %w", err)
		}
		for _, r := range rs {
			if k := (domain.WalletKey{RenterID: r.RenterID, Currency: r.Currency}); !r.ClosedAt.IsZero() && !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
		return lc.Evaluate(ctx, &LeaseTx{Tx: tx, Webhooks: webhooks}, keys)
	}
	return outbox.ReadModelStore[domain.RenterLimit]{Pool: pool, Schema: Schema, Upsert: upsert}
}

// lockRenters takes, until the transaction ends, the lock of each renter
// named (a transaction-scoped advisory lock, in the order of its key, so
// two transactions taking several never deadlock). A lease control
// evaluation takes it before it reads the renters' credit limits, and the
// renters' read model before it stores them and looks for the wallets to
// evaluate again: in READ COMMITTED neither saw the other's uncommitted
// rows, so a credit limit that arrived while a charge was being evaluated
// was missed by both, and the renter stayed stopped with its limit to spend
// until the sweep (leaseSweepEvery) found it. Now the second to take the
// lock waits for the first to commit and its next statement sees what the
// first wrote (TestLeaseControlSeesACreditLimitArrivingMidEvaluation).
func lockRenters(ctx context.Context, tx pgx.Tx, renterIDs []string) error {
	if len(renterIDs) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, `select count(pg_advisory_xact_lock(hashtext('gpubill.ledger.renter'), h))
		from (select distinct hashtext(r) as h from unnest($1::text[]) as r order by h) s`, renterIDs); err != nil {
		return fmt.Errorf("lock renters: %w", err)
	}
	return nil
}

// UpsertRenters stores renter versions newer than those held.
func UpsertRenters(ctx context.Context, tx pgx.Tx, rs []domain.RenterLimit) error {
	b := &pgx.Batch{}
	for _, r := range rs {
		var closed *time.Time
		if !r.ClosedAt.IsZero() {
			closed = &r.ClosedAt
		}
		b.Queue(`insert into ledger.renters (renter_id, currency, credit_limit, version, updated_at, closed_at) values ($1, $2, $3, $4, $5, $6)
			on conflict (renter_id) do update set currency = excluded.currency, credit_limit = excluded.credit_limit,
				version = excluded.version, updated_at = excluded.updated_at, closed_at = excluded.closed_at
			where ledger.renters.version < excluded.version`, r.RenterID, r.Currency, r.CreditLimit, r.Version, r.UpdatedAt, closed)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("renters: %w", err)
	}
	return nil
}

// A wallet k (renter_id, currency) as lease control reads it, from its
// balance row b and its renter's row r (either missing): the balance on the
// wallet's normal side, the credit limit (in the renter's currency; 0 in
// any other), whether the renter is known to be billed in another currency,
// whether it is closed, and what is left to spend (domain.Wallet.Available). The sweeps select
// by the same rule the evaluation applies.
const (
	walletBalanceSQL   = `coalesce(b.credits - b.debits, 0)`
	walletLimitSQL     = `case when r.currency = k.currency then r.credit_limit else 0 end`
	walletForeignSQL   = `coalesce(r.currency <> k.currency, false)`
	walletClosedSQL    = `(r.closed_at is not null)`
	walletAvailableSQL = `(` + walletBalanceSQL + ` + ` + walletLimitSQL + `)`
)

// walletsSQL reads, per (renter, currency, wallet address), the balance,
// credit limit, whether the renter is billed in another currency and
// whether it is closed.
const walletsSQL = `select k.renter_id, k.currency, ` + walletBalanceSQL + `, ` + walletLimitSQL + `, ` + walletForeignSQL + `, ` + walletClosedSQL + `
	from unnest($1::text[], $2::text[], $3::text[]) as k(renter_id, currency, address)
	left join ledger.balances b on b.account = k.address collate "C" and b.currency = k.currency
	left join ledger.renters r on r.renter_id = k.renter_id
	order by k.renter_id, k.currency`

// resumableSQL lists up to $1 stopped wallets that NextLease resumes: money
// to spend again, or the renter billed in another currency, and the renter
// not closed; oldest stop first. It reads the stopped wallets only (lease_control_stopped,
// migration ledger/0023), each with its balance and renter by key; the
// address is ids.RenterWallet's.
const resumableSQL = `select k.renter_id, k.currency from ledger.lease_control k
	left join ledger.balances b on b.account = ('renter:' || k.renter_id || ':wallet') collate "C" and b.currency = k.currency
	left join ledger.renters r on r.renter_id = k.renter_id
	where k.state = 'stopped' and not ` + walletClosedSQL + ` and (` + walletForeignSQL + ` or ` + walletAvailableSQL + ` > 0)
	order by k.updated_at limit $1`

// exhaustedSQL lists up to $2 renter wallets charged since $1 that NextLease
// stops and lease control has not: the renter closed, or nothing left to
// spend and billed in their renter's currency; not stopped (or never
// evaluated). It reads the wallets
// of wallet_burn's minutes since $1 (wallet_burn_minute, migration
// ledger/0023) and looks each one's balance, renter and lease control up by
// key: joined plainly, the planner hashed the whole of renters and
// lease_control for ten thousand charged wallets. The renter id is the
// wallet address's second part (ids.RenterWallet), in the default
// collation so the renters and lease_control keys apply.
const exhaustedSQL = `select k.renter_id, k.currency from (
		select distinct w.account, w.currency, split_part(w.account, ':', 2) collate "default" as renter_id
		from ledger.wallet_burn w where w.minute >= $1 and w.account like 'renter:%:wallet') k
	left join lateral (select * from ledger.balances b where b.account = k.account and b.currency = k.currency limit 1) b on true
	left join lateral (select * from ledger.renters r where r.renter_id = k.renter_id limit 1) r on true
	left join lateral (select * from ledger.lease_control c where c.renter_id = k.renter_id and c.currency = k.currency limit 1) c on true
	where c.state is distinct from 'stopped' and (` + walletClosedSQL + ` or (not ` + walletForeignSQL + ` and ` + walletAvailableSQL + ` <= 0))
	order by k.renter_id, k.currency limit $2`

// burnSQL sums, per (wallet address, currency), the usage charged to the
// wallet since $3: wallet_burn's minutes from $4 on ($4 is the minute after
// $3's), and the charge postings between $3 and $4 one by one. Each
// wallet reads at most 61 minute rows and a minute of postings, however
// often it is charged.
const burnSQL = `select k.n,
		coalesce((select sum(b.amount) from ledger.wallet_burn b
			where b.account = k.address collate "C" and b.currency = k.currency and b.minute >= $4), 0)
		+ coalesce((select sum(p.amount) from ledger.postings p join ledger.transactions t on t.id = p.tx_id
			where p.account = k.address collate "C" and p.currency = k.currency and p.direction = 'debit'
				and p.created_at > $3 and p.created_at < $4 and t.kind = 'charge'), 0)
	from unnest($1::text[], $2::text[]) with ordinality as k(address, currency, n)`

// readWallets reads the wallets of keys, without their burn rate.
func readWallets(ctx context.Context, q Querier, keys []domain.WalletKey) ([]domain.Wallet, error) {
	rs, cs, as := make([]string, len(keys)), make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		rs[i], cs[i], as[i] = k.RenterID, k.Currency, domain.RenterWallet(k.RenterID)
	}
	rows, err := q.Query(ctx, walletsSQL, rs, cs, as)
	if err != nil {
		return nil, fmt.Errorf("wallets: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (domain.Wallet, error) {
		var w domain.Wallet
		return w, r.Scan(&w.RenterID, &w.Currency, &w.Balance, &w.CreditLimit, &w.Foreign, &w.Closed)
	})
}

// readBurn sets the burn rate of the wallets ws[i] for which want(i) holds.
// In a transaction it turns JIT compilation off first: the planner's cost
// of a few hundred wallets crosses jit_above_cost, and compiling took longer
// than the query (100–160 ms a call in the ledger_postings benchmark).
func readBurn(ctx context.Context, q Querier, inTx bool, ws []domain.Wallet, since time.Time, want func(i int) bool) error {
	var as, cs []string
	var at []int
	for i, w := range ws {
		if want(i) {
			as, cs, at = append(as, domain.RenterWallet(w.RenterID)), append(cs, w.Currency), append(at, i)
		}
	}
	if len(at) == 0 {
		return nil
	}
	if inTx {
		if _, err := q.Exec(ctx, `set local jit = off`); err != nil {
			return fmt.Errorf("burn rate: %w", err)
		}
	}
	rows, err := q.Query(ctx, burnSQL, as, cs, since, burnMinute(since).Add(time.Minute))
	if err != nil {
		return fmt.Errorf("burn rate: %w", err)
	}
	var n int64
	var burn decimal.Decimal
	_, err = pgx.ForEachRow(rows, []any{&n, &burn}, func() error {
		if n < 1 || int(n) > len(at) {
			return fmt.Errorf("burn rate: row %d of %d", n, len(at))
		}
		ws[at[n-1]].BurnPerHour = burn
		return nil
	})
	if err != nil {
		return fmt.Errorf("burn rate: %w", err)
	}
	return nil
}

func sortKeys(keys []domain.WalletKey) []domain.WalletKey {
	out := append([]domain.WalletKey(nil), keys...)
	sort.Slice(out, func(i, j int) bool {
		if out[i].RenterID != out[j].RenterID {
			return out[i].RenterID < out[j].RenterID
		}
		return out[i].Currency < out[j].Currency
	})
	return out
}

func readLeases(ctx context.Context, q Querier, keys []domain.WalletKey, lock bool) (map[domain.WalletKey]domain.Lease, error) {
	rs, cs := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		rs[i], cs[i] = k.RenterID, k.Currency
	}
	sql := `select renter_id, currency, state, crossings, warnings, over_limit_since from ledger.lease_control
		where (renter_id, currency) in (select * from unnest($1::text[], $2::text[])) order by renter_id, currency`
	if lock {
		sql += ` for update`
	}
	rows, err := q.Query(ctx, sql, rs, cs)
	if err != nil {
		return nil, fmt.Errorf("lease control: %w", err)
	}
	out := map[domain.WalletKey]domain.Lease{}
	var k domain.WalletKey
	var l domain.Lease
	var since *time.Time
	_, err = pgx.ForEachRow(rows, []any{&k.RenterID, &k.Currency, &l.State, &l.Crossing, &l.Warnings, &since}, func() error {
		l.OverLimitSince = time.Time{}
		if since != nil {
			l.OverLimitSince = *since
		}
		out[k] = l
		return nil
	})
	return out, err
}

// LeaseStore is app.LeaseControlStore on the ledger's tables.
type LeaseStore struct {
	Pool *pgxpool.Pool
	// Webhooks queues each announcement for GPUBILL_LEASE_CONTROL_URL.
	Webhooks bool
}

var _ app.LeaseControlStore = LeaseStore{}

// WithLeaseTx runs fn in one transaction.
func (s LeaseStore) WithLeaseTx(ctx context.Context, fn func(app.LeaseControlTx) error) error {
	return pg.InTx(ctx, s.Pool, func(tx pgx.Tx) error { return fn(&LeaseTx{Tx: tx, Webhooks: s.Webhooks}) })
}

// LeaseTx is lease control's work inside one consumer transaction.
type LeaseTx struct {
	Tx pgx.Tx
	// Webhooks queues each announcement for GPUBILL_LEASE_CONTROL_URL.
	Webhooks bool
}

// Claim records the message ids in the ledger's inbox and returns the fresh ones.
func (l *LeaseTx) Claim(ctx context.Context, consumer string, ids []string) (map[string]bool, error) {
	return outbox.Claim(ctx, l.Tx, Schema, consumer, ids)
}

// LoadWallets takes the wallets' renters' locks (lockRenters), locks their
// lease control rows (made when missing, in key order) and reads the
// wallets, their burn rate only where domain.BurnMatters.
func (l *LeaseTx) LoadWallets(ctx context.Context, keys []domain.WalletKey, burnSince, at time.Time) ([]domain.WalletStatus, error) {
	keys = sortKeys(keys)
	rs, cs := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		rs[i], cs[i] = k.RenterID, k.Currency
	}
	if err := lockRenters(ctx, l.Tx, rs); err != nil {
		return nil, err
	}
	if _, err := l.Tx.Exec(ctx, `insert into ledger.lease_control (renter_id, currency, state, updated_at)
		select r, c, 'ok', $3 from unnest($1::text[], $2::text[]) as k(r, c) order by r, c on conflict do nothing`, rs, cs, at); err != nil {
		return nil, fmt.Errorf("lease control: %w", err)
	}
	leases, err := readLeases(ctx, l.Tx, keys, true)
	if err != nil {
		return nil, err
	}
	ws, err := readWallets(ctx, l.Tx, keys)
	if err != nil {
		return nil, err
	}
	out := make([]domain.WalletStatus, len(ws))
	for i, w := range ws {
		out[i] = domain.WalletStatus{Wallet: w, Lease: leases[domain.WalletKey{RenterID: w.RenterID, Currency: w.Currency}]}
	}
	if err := readBurn(ctx, l.Tx, true, ws, burnSince, func(i int) bool { return domain.BurnMatters(out[i].Lease, ws[i]) }); err != nil {
		return nil, err
	}
	for i := range out {
		out[i].BurnPerHour = ws[i].BurnPerHour
	}
	return out, nil
}

// SaveLeases records where lease control stands with each wallet, in one
// statement.
func (l *LeaseTx) SaveLeases(ctx context.Context, ss []app.LeaseSave, at time.Time) error {
	if len(ss) == 0 {
		return nil
	}
	n := len(ss)
	rs, cs, states := make([]string, n), make([]string, n), make([]string, n)
	crossings, warnings := make([]int64, n), make([]int64, n)
	since := make([]*time.Time, n)
	for i, s := range ss {
		rs[i], cs[i], states[i], crossings[i], warnings[i] = s.Key.RenterID, s.Key.Currency, string(s.Lease.State), s.Lease.Crossing, s.Lease.Warnings
		if !s.Lease.OverLimitSince.IsZero() {
			t := s.Lease.OverLimitSince
			since[i] = &t
		}
	}
	tag, err := l.Tx.Exec(ctx, `update ledger.lease_control c set state = u.s, crossings = u.x, warnings = u.w, over_limit_since = u.o,
			updated_at = $7
		from unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::timestamptz[]) as u(r, c, s, x, w, o)
		where c.renter_id = u.r and c.currency = u.c`, rs, cs, states, crossings, warnings, since, at)
	if err == nil && tag.RowsAffected() != int64(n) {
		err = fmt.Errorf("%d of %d lease control rows updated", tag.RowsAffected(), n)
	}
	if err != nil {
		return fmt.Errorf("save lease control: %w", err)
	}
	return nil
}

// LeaseEventPB is the announcement as published and sent.
func LeaseEventPB(ev domain.LeaseEvent) *eventsv1.LeaseControl {
	w := ev.Wallet
	return &eventsv1.LeaseControl{EventId: ev.ID(), RenterId: w.RenterID, Kind: string(ev.Kind), Currency: w.Currency,
		Balance: w.Balance.String(), CreditLimit: w.CreditLimit.String(), BurnRatePerHour: w.BurnPerHour.String(),
		RunwayHours: w.RunwayString(), Crossing: ev.Crossing, At: timestamppb.New(ev.At)}
}

// Resumable implements app.LeaseControlTx.
func (l *LeaseTx) Resumable(ctx context.Context, limit int) ([]domain.WalletKey, error) {
	rows, err := l.Tx.Query(ctx, resumableSQL, limit)
	if err != nil {
		return nil, fmt.Errorf("stopped wallets with money to spend: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[domain.WalletKey])
}

// Exhausted implements app.LeaseControlTx.
func (l *LeaseTx) Exhausted(ctx context.Context, chargedSince time.Time, limit int) ([]domain.WalletKey, error) {
	rows, err := l.Tx.Query(ctx, exhaustedSQL, burnMinute(chargedSince), limit)
	if err != nil {
		return nil, fmt.Errorf("charged wallets with nothing to spend: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[domain.WalletKey])
}

// Announce puts the events into the outbox (lease.….{renter}) and, with
// webhooks on, the webhook queue; both keyed by each event's id.
func (l *LeaseTx) Announce(ctx context.Context, evs []domain.LeaseEvent) error {
	if len(evs) == 0 {
		return nil
	}
	msgs := make([]outbox.Message, 0, len(evs))
	hooks := &pgx.Batch{}
	for _, ev := range evs {
		pb := LeaseEventPB(ev)
		b, err := proto.Marshal(pb)
		if err != nil {
			return err
		}
		msgs = append(msgs, outbox.Message{ID: ev.ID(), Subject: ev.Kind.Subject(ev.Wallet.RenterID), Payload: b})
		if !l.Webhooks {
			continue
		}
		body, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(pb)
		if err != nil {
			return err
		}
		hooks.Queue(`insert into ledger.lease_webhooks (event_id, renter_id, kind, payload, status, next_attempt_at, created_at)
			values ($1, $2, $3, $4, 'pending', $5, $5) on conflict (event_id) do nothing`, ev.ID(), ev.Wallet.RenterID, string(ev.Kind), body, ev.At)
	}
	if err := outbox.Add(ctx, l.Tx, Schema, msgs...); err != nil {
		return fmt.Errorf("announce %d lease control events (%s…): %w", len(evs), evs[0].ID(), err)
	}
	if hooks.Len() == 0 {
		return nil
	}
	if err := l.Tx.SendBatch(ctx, hooks).Close(); err != nil {
		return fmt.Errorf("queue %d lease control webhooks (%s…): %w", hooks.Len(), evs[0].ID(), err)
	}
	return nil
}

// Wallets reads every currency of a renter's wallet (those with a balance
// and the renter's own currency) with its lease control; none when the
// ledger knows neither.
type Wallets struct{ Pool *pgxpool.Pool }

// Wallet implements app.WalletReader.
func (w *Wallets) Wallet(ctx context.Context, renter string, burnSince time.Time) ([]domain.WalletStatus, error) {
	rows, err := w.Pool.Query(ctx, `select currency from ledger.balances where account = $1
		union select currency from ledger.renters where renter_id = $2 order by 1`, domain.RenterWallet(renter), renter)
	if err != nil {
		return nil, fmt.Errorf("wallet %s: %w", renter, err)
	}
	curs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("wallet %s: %w", renter, err)
	}
	if len(curs) == 0 {
		return nil, nil
	}
	keys := make([]domain.WalletKey, len(curs))
	for i, c := range curs {
		keys[i] = domain.WalletKey{RenterID: renter, Currency: c}
	}
	leases, err := readLeases(ctx, w.Pool, keys, false)
	if err != nil {
		return nil, err
	}
	ws, err := readWallets(ctx, w.Pool, keys)
	if err != nil {
		return nil, err
	}
	if err := readBurn(ctx, w.Pool, false, ws, burnSince, func(int) bool { return true }); err != nil {
		return nil, err
	}
	out := make([]domain.WalletStatus, len(ws))
	for i, x := range ws {
		l, ok := leases[domain.WalletKey{RenterID: x.RenterID, Currency: x.Currency}]
		if !ok {
			l.State = domain.LeaseOK
		}
		out[i] = domain.WalletStatus{Wallet: x, Lease: l}
	}
	return out, nil
}
