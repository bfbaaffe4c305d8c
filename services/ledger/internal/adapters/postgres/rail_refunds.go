package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// DepositRefunds reads the deposit of external_ref ref (apperr.ErrNotFound
// if none) with its reversal and the unreversed rail_refunds naming it
// (transactions_rail_refund_idx), as of this statement: called once the
// wallet's balance row is locked, it sees every rail refund of the
// deposit committed before, as each debits that same row.
func (t *Tx) DepositRefunds(ctx context.Context, ref string) (domain.DepositRefunds, error) {
	var d domain.DepositRefunds
	var amount, refunded string
	err := t.tx.QueryRow(ctx, `select d.id::text, p.account, p.currency, p.amount::text,
			exists (select 1 from ledger.reversals r where r.original_id = d.id),
			coalesce((select sum(rp.amount) from ledger.transactions rt
				join ledger.postings rp on rp.tx_id = rt.id
				where rt.metadata->>'kind' = $3 and rt.metadata->>'external_ref' = $2
					and rp.direction = 'debit' and rp.account = p.account and rp.currency = p.currency
					and not exists (select 1 from ledger.reversals r where r.original_id = rt.id)), 0)::text
		from ledger.transactions d join ledger.postings p on p.tx_id = d.id and p.direction = 'credit'
		where d.idempotency_key = $1 and d.kind = 'deposit'`,
		domain.DepositKeyPrefix+ref, ref, domain.KindRailRefund).Scan(
		&d.DepositID, &d.Wallet, &d.Currency, &amount, &d.Reversed, &refunded)
	if errors.Is(err, pgx.ErrNoRows) {
		return d, apperr.ErrNotFound
	}
	if err != nil {
		return d, fmt.Errorf("deposit %s and its refunds: %w", ref, err)
	}
	if d.Amount, err = decimal.NewFromString(amount); err != nil {
		return d, fmt.Errorf("deposit %s amount %q: %w", ref, amount, err)
	}
	if d.RailRefunded, err = decimal.NewFromString(refunded); err != nil {
		return d, fmt.Errorf("deposit %s rail refunds %q: %w", ref, refunded, err)
	}
	return d, nil
}
