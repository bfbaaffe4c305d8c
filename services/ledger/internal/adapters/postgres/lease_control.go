package postgres

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/outbox"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// RenterLimit is the ledger's read model of a renter (metering owns it):
// its currency and credit limit.
type RenterLimit struct {
	RenterID, Currency string
	CreditLimit        decimal.Decimal
	Version            int64
	UpdatedAt          time.Time
}

// UpsertRenters stores renter versions newer than those held.
func UpsertRenters(ctx context.Context, tx pgx.Tx, rs []RenterLimit) error {
	b := &pgx.Batch{}
	for _, r := range rs {
		b.Queue(`insert into ledger.renters (renter_id, currency, credit_limit, version, updated_at) values ($1, $2, $3, $4, $5)
			on conflict (renter_id) do update set currency = excluded.currency, credit_limit = excluded.credit_limit,
				version = excluded.version, updated_at = excluded.updated_at
			where ledger.renters.version < excluded.version`, r.RenterID, r.Currency, r.CreditLimit, r.Version, r.UpdatedAt)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("renters: %w", err)
	}
	return nil
}

// walletsSQL reads, per (renter, currency, wallet address), the balance on
// the wallet's normal side, the credit limit (in the renter's currency; 0 in
// any other) and the usage charged to the wallet since $4.
const walletsSQL = `select k.renter_id, k.currency, coalesce(b.credits - b.debits, 0), coalesce(r.credit_limit, 0),
		coalesce(burn.amount, 0)
	from unnest($1::text[], $2::text[], $3::text[]) as k(renter_id, currency, address)
	left join ledger.balances b on b.account = k.address collate "C" and b.currency = k.currency
	left join ledger.renters r on r.renter_id = k.renter_id and r.currency = k.currency
	left join lateral (select sum(p.amount) as amount from ledger.postings p join ledger.transactions t on t.id = p.tx_id
		where p.account = k.address collate "C" and p.currency = k.currency and p.direction = 'debit'
			and p.created_at > $4 and t.kind = 'charge') burn on true
	order by k.renter_id, k.currency`

func readWallets(ctx context.Context, q Querier, keys []domain.WalletKey, since time.Time) ([]domain.Wallet, error) {
	rs, cs, as := make([]string, len(keys)), make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		rs[i], cs[i], as[i] = k.RenterID, k.Currency, domain.RenterWallet(k.RenterID)
	}
	rows, err := q.Query(ctx, walletsSQL, rs, cs, as, since)
	if err != nil {
		return nil, fmt.Errorf("wallets: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (domain.Wallet, error) {
		var w domain.Wallet
		return w, r.Scan(&w.RenterID, &w.Currency, &w.Balance, &w.CreditLimit, &w.BurnPerHour)
	})
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

// LeaseTx is lease control's work inside one consumer transaction.
type LeaseTx struct {
	Tx pgx.Tx
	// Webhooks queues each announcement for GPUBILL_LEASE_CONTROL_URL.
	Webhooks bool
}

// LoadWallets locks the wallets' lease control rows (made when missing, in
// key order) and reads the wallets.
func (l *LeaseTx) LoadWallets(ctx context.Context, keys []domain.WalletKey, burnSince, at time.Time) ([]domain.WalletStatus, error) {
	keys = sortKeys(keys)
	rs, cs := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		rs[i], cs[i] = k.RenterID, k.Currency
	}
	if _, err := l.Tx.Exec(ctx, `insert into ledger.lease_control (renter_id, currency, state, updated_at)
		select r, c, 'ok', $3 from unnest($1::text[], $2::text[]) as k(r, c) order by r, c on conflict do nothing`, rs, cs, at); err != nil {
		return nil, fmt.Errorf("lease control: %w", err)
	}
	leases, err := readLeases(ctx, l.Tx, keys, true)
	if err != nil {
		return nil, err
	}
	ws, err := readWallets(ctx, l.Tx, keys, burnSince)
	if err != nil {
		return nil, err
	}
	out := make([]domain.WalletStatus, len(ws))
	for i, w := range ws {
		out[i] = domain.WalletStatus{Wallet: w, Lease: leases[domain.WalletKey{RenterID: w.RenterID, Currency: w.Currency}]}
	}
	return out, nil
}

// SaveLease records where lease control stands with a wallet.
func (l *LeaseTx) SaveLease(ctx context.Context, k domain.WalletKey, s domain.Lease, at time.Time) error {
	var since *time.Time
	if !s.OverLimitSince.IsZero() {
		since = &s.OverLimitSince
	}
	tag, err := l.Tx.Exec(ctx, `update ledger.lease_control set state = $3, crossings = $4, warnings = $5, over_limit_since = $6,
		updated_at = $7 where renter_id = $1 and currency = $2`, k.RenterID, k.Currency, string(s.State), s.Crossing, s.Warnings, since, at)
	if err == nil && tag.RowsAffected() != 1 {
		err = errors.New("lease control row vanished")
	}
	if err != nil {
		return fmt.Errorf("save lease control of %s %s: %w", k.RenterID, k.Currency, err)
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

// Announce puts the event into the outbox (lease.….{renter}) and, with
// webhooks on, the webhook queue; both keyed by the event's id.
func (l *LeaseTx) Announce(ctx context.Context, ev domain.LeaseEvent) error {
	pb := LeaseEventPB(ev)
	b, err := proto.Marshal(pb)
	if err != nil {
		return err
	}
	if err := outbox.Add(ctx, l.Tx, Schema, outbox.Message{ID: ev.ID(), Subject: ev.Kind.Subject(ev.Wallet.RenterID), Payload: b}); err != nil {
		return fmt.Errorf("announce %s: %w", ev.ID(), err)
	}
	if !l.Webhooks {
		return nil
	}
	body, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(pb)
	if err != nil {
		return err
	}
	if _, err := l.Tx.Exec(ctx, `insert into ledger.lease_webhooks (event_id, renter_id, kind, payload, status, next_attempt_at, created_at)
		values ($1, $2, $3, $4, 'pending', $5, $5) on conflict (event_id) do nothing`, ev.ID(), ev.Wallet.RenterID, string(ev.Kind), body, ev.At); err != nil {
		return fmt.Errorf("queue webhook %s: %w", ev.ID(), err)
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
	ws, err := readWallets(ctx, w.Pool, keys, burnSince)
	if err != nil {
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
