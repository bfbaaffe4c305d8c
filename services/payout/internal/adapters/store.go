// Package adapters holds payout's Postgres store (schema "payout").
package adapters

import (
	"context"

	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
)

// Schema is payout's Postgres schema.
const Schema = "payout"

// Store reads and writes payout's tables.
type Store struct{ Pool *pgxpool.Pool }

// Method is a provider's payout method.
type Method struct {
	ProviderID, Type, AccountName, AccountNumber, AlipayID, WechatOpenID, BankCode string
	UpdatedAt                                                                      time.Time
}

// PutMethod replaces a provider's payout method.
func (s *Store) PutMethod(ctx context.Context, m Method) error {
	_, err := s.Pool.Exec(ctx, `insert into payout.methods (provider_id, type, account_name, account_number, alipay_id, wechat_openid, bank_code, updated_at)
		values ($1, $2, $3, $4, $5, $6, $7, $8) on conflict (provider_id) do update set type = excluded.type,
		account_name = excluded.account_name, account_number = excluded.account_number, alipay_id = excluded.alipay_id,
		wechat_openid = excluded.wechat_openid, bank_code = excluded.bank_code, updated_at = excluded.updated_at`,
		m.ProviderID, m.Type, m.AccountName, m.AccountNumber, m.AlipayID, m.WechatOpenID, m.BankCode, m.UpdatedAt)
	return err
}

// PutKYC sets a provider's KYC status.
func (s *Store) PutKYC(ctx context.Context, provider, status, reference string, at time.Time) error {
	_, err := s.Pool.Exec(ctx, `insert into payout.kyc (provider_id, status, reference, updated_at) values ($1, $2, $3, $4)
		on conflict (provider_id) do update set status = excluded.status, reference = excluded.reference, updated_at = excluded.updated_at`,
		provider, status, reference, at)
	return err
}

// Gate returns a provider's KYC status and payout method type ("" when none) inside tx.
func (s *Store) Gate(ctx context.Context, tx pgx.Tx, provider string) (kyc, method string, err error) {
	err = tx.QueryRow(ctx, `select coalesce((select status from payout.kyc where provider_id = $1), ''),
		coalesce((select type from payout.methods where provider_id = $1), '')`, provider).Scan(&kyc, &method)
	return kyc, method, err
}

// Payout is one payout with its history.
type Payout struct {
	ID, ProviderID, CycleID, Currency    string
	Gross, Commission, Tax, Net          decimal.Decimal
	Status, Method, FailureCode, RailRef string
	CreatedAt, UpdatedAt                 time.Time
	History                              []Change
}

// Change is one status change.
type Change struct {
	Status, Note string
	At           time.Time
}

// CreatePayout inserts a payout for a settled provider, cycle and currency
// once; it reports whether it was new.
func (s *Store) CreatePayout(ctx context.Context, tx pgx.Tx, p Payout, note string) (bool, error) {
	tag, err := tx.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission,
			tax_withheld, net, status, method, created_at, updated_at)
		values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11) on conflict (provider_id, cycle_id, currency) do nothing`,
		p.ID, p.ProviderID, p.CycleID, p.Currency, p.Gross, p.Commission, p.Tax, p.Net, p.Status, p.Method, p.CreatedAt)
	if err != nil || tag.RowsAffected() == 0 {
		return false, err
	}
	_, err = tx.Exec(ctx, `insert into payout.status_history (payout_id, seq, status, note, at) values ($1, 1, $2, $3, $4)`,
		p.ID, p.Status, note, p.CreatedAt)
	return true, err
}

const payoutCols = `payout_id, provider_id, cycle_id, currency, gross, commission, tax_withheld, net, status, method,
	failure_code, rail_reference, created_at, updated_at`

func (s *Store) list(ctx context.Context, where string, args ...any) ([]Payout, error) {
	rows, err := s.Pool.Query(ctx, `select `+payoutCols+` from payout.payouts where `+where, args...)
	if err != nil {
		return nil, err
	}
	ps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Payout, error) {
		var p Payout
		return p, r.Scan(&p.ID, &p.ProviderID, &p.CycleID, &p.Currency, &p.Gross, &p.Commission, &p.Tax, &p.Net, &p.Status,
			&p.Method, &p.FailureCode, &p.RailRef, &p.CreatedAt, &p.UpdatedAt)
	})
	if err != nil {
		return nil, err
	}
	for i := range ps {
		hrows, err := s.Pool.Query(ctx, `select status, note, at from payout.status_history where payout_id = $1 order by seq`, ps[i].ID)
		if err != nil {
			return nil, err
		}
		if ps[i].History, err = pgx.CollectRows(hrows, func(r pgx.CollectableRow) (Change, error) {
			var c Change
			return c, r.Scan(&c.Status, &c.Note, &c.At)
		}); err != nil {
			return nil, err
		}
	}
	return ps, nil
}

// GetPayout returns one payout or ErrNotFound.
func (s *Store) GetPayout(ctx context.Context, id string) (Payout, error) {
	ps, err := s.list(ctx, `payout_id = $1`, id)
	if err != nil {
		return Payout{}, err
	}
	if len(ps) == 0 {
		return Payout{}, fmt.Errorf("payout %s: %w", id, apperr.ErrNotFound)
	}
	return ps[0], nil
}

// ListPayouts lists a provider's payouts, newest first.
func (s *Store) ListPayouts(ctx context.Context, provider, cycle, status, before string, limit int) ([]Payout, error) {
	return s.list(ctx, `provider_id = $1 and ($2 = '' or cycle_id = $2) and ($3 = '' or status = $3)
		and ($4 = '' or payout_id < $4) order by payout_id desc limit $5`, provider, cycle, status, before, limit)
}
