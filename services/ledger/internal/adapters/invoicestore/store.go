// Package invoicestore keeps the ledger's invoices in Postgres and reads the
// journal they are made of (invoicing.Repository).
package invoicestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/taxperiod"
	"github.com/gpubill/gpubill/services/ledger/internal/app/invoicing"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// Store implements invoicing.Repository over the ledger schema.
type Store struct{ Pool *pgxpool.Pool }

var _ invoicing.Repository = (*Store)(nil)

// Uninvoiced implements invoicing.Repository: renter wallets (from the
// balances table, one row per account and currency) with a posting in the
// window (the postings index by account and time), and those of the
// renters with a charge billed at 0.00 in it (ledger.unbilled_charges: a
// month of only those moved no money, and its usage was on no invoice),
// with no invoice for period.
func (s *Store) Uninvoiced(ctx context.Context, period string, start, end time.Time) ([]invoicing.Wallet, error) {
	rows, err := s.Pool.Query(ctx, `select w.account, w.currency from (
			select b.account, b.currency from ledger.balances b
			where b.account like 'renter:%:wallet'
			  and exists (select 1 from ledger.postings p where p.account = b.account and p.currency = b.currency
			              and p.created_at >= $1 and p.created_at < $2)
			union
			select ('renter:' || u.renter_id || ':wallet') collate "C", u.currency from ledger.unbilled_charges u
			where u.created_at >= $1 and u.created_at < $2) w
		where not exists (select 1 from ledger.invoices i where i.renter_id = split_part(w.account, ':', 2)
		              and i.currency = w.currency and i.period = $3)
		order by w.account, w.currency`, start, end, period)
	if err != nil {
		return nil, fmt.Errorf("uninvoiced wallets: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (invoicing.Wallet, error) {
		var addr, cur string
		if err := r.Scan(&addr, &cur); err != nil {
			return invoicing.Wallet{}, err
		}
		parts := strings.Split(addr, ":")
		if len(parts) != 3 {
			return invoicing.Wallet{}, fmt.Errorf("wallet address %q", addr)
		}
		return invoicing.Wallet{RenterID: parts[1], Currency: cur}, nil
	})
}

// WalletActivity implements invoicing.Repository. The balances and the
// movements are read in one repeatable-read transaction, so they are of
// one snapshot.
func (s *Store) WalletActivity(ctx context.Context, w invoicing.Wallet, start, end time.Time) (domain.WalletActivity, error) {
	addr := ids.RenterWallet(w.RenterID)
	var act domain.WalletActivity
	err := pgx.BeginTxFunc(ctx, s.Pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		const bal = `select coalesce(sum(case when direction = 'credit' then amount else -amount end), 0)::text
			from ledger.postings where account = $1 and currency = $2 and created_at < $3`
		var open, closing string
		if err := tx.QueryRow(ctx, bal, addr, w.Currency, start).Scan(&open); err != nil {
			return fmt.Errorf("opening balance: %w", err)
		}
		if err := tx.QueryRow(ctx, bal, addr, w.Currency, end).Scan(&closing); err != nil {
			return fmt.Errorf("closing balance: %w", err)
		}
		var err error
		if act.Opening, err = decimal.NewFromString(open); err != nil {
			return err
		}
		if act.Closing, err = decimal.NewFromString(closing); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `select t.kind, t.id::text, t.idempotency_key, coalesce(t.metadata->>'external_ref', ''), min(p.created_at),
				sum(case when p.direction = 'credit' then p.amount else -p.amount end)::text
			from ledger.postings p join ledger.transactions t on t.id = p.tx_id
			where p.account = $1 and p.currency = $2 and p.created_at >= $3 and p.created_at < $4
			group by t.kind, t.id, t.idempotency_key, t.metadata->>'external_ref'
			order by min(p.created_at), t.id`, addr, w.Currency, start, end)
		if err != nil {
			return fmt.Errorf("wallet movements: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var kind, id, key, ref, net string
			var at time.Time
			if err := rows.Scan(&kind, &id, &key, &ref, &at, &net); err != nil {
				return err
			}
			n, err := decimal.NewFromString(net)
			if err != nil {
				return err
			}
			switch domain.TxKind(kind) {
			case domain.TxDeposit:
				act.Deposits = append(act.Deposits, domain.InvoiceDeposit{TransactionID: id, PostedAt: at.UTC(), Amount: n, Reference: ref})
			case domain.TxCharge:
				act.Charges = act.Charges.Sub(n)
				act.ChargeIDs = append(act.ChargeIDs, key)
			default:
				act.Adjustments = act.Adjustments.Add(n)
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		zeros, err := unbilledChargeIDs(ctx, tx, w, start, end)
		act.ChargeIDs = append(act.ChargeIDs, zeros...)
		return err
	})
	if err != nil {
		return domain.WalletActivity{}, fmt.Errorf("wallet %s %s activity: %w", addr, w.Currency, err)
	}
	return act, nil
}

// unbilledChargeIDs are the wallet's charges billed at 0.00 in [start,
// end): they moved no money, but pricing explains their GPU-hours with the
// others' (ledger.unbilled_charges).
func unbilledChargeIDs(ctx context.Context, tx pgx.Tx, w invoicing.Wallet, start, end time.Time) ([]string, error) {
	rows, err := tx.Query(ctx, `select charge_id from ledger.unbilled_charges
		where renter_id = $1 and currency = $2 and created_at >= $3 and created_at < $4
		order by created_at, charge_id`, w.RenterID, w.Currency, start, end)
	if err != nil {
		return nil, fmt.Errorf("unbilled charges: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("unbilled charges: %w", err)
	}
	return ids, nil
}

// Insert implements invoicing.Repository.
func (s *Store) Insert(ctx context.Context, inv *domain.Invoice, year int) error {
	lines, err := json.Marshal(toLineRows(inv.Lines))
	if err != nil {
		return err
	}
	deps, err := json.Marshal(toDepositRows(inv.DepositEntries))
	if err != nil {
		return err
	}
	return pg.InTx(ctx, s.Pool, func(tx pgx.Tx) error {
		var n int64
		if err := tx.QueryRow(ctx, `insert into ledger.invoice_counters as c (year, last_number) values ($1, 1)
			on conflict (year) do update set last_number = c.last_number + 1
			returning last_number`, year).Scan(&n); err != nil {
			return fmt.Errorf("invoice counter %d: %w", year, err)
		}
		number := domain.InvoiceNumber(year, n)
		tag, err := tx.Exec(ctx, `insert into ledger.invoices (invoice_id, number, year, seq, renter_id, currency, period, time_zone,
				period_start, period_end, issued_at, opening_balance, deposits, charges, adjustments, closing_balance,
				tier_discounts, surcharges, lines, deposit_entries)
			values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12::numeric, $13::numeric, $14::numeric, $15::numeric,
				$16::numeric, $17::numeric, $18::numeric, $19, $20)
			on conflict (renter_id, currency, period) do nothing`,
			inv.ID, number, year, n, inv.RenterID, inv.Currency, inv.Period, inv.TimeZone, inv.PeriodStart, inv.PeriodEnd,
			inv.IssuedAt, inv.Opening.String(), inv.Deposits.String(), inv.Charges.String(), inv.Adjustments.String(),
			inv.Closing.String(), inv.TierDiscounts.String(), inv.Surcharges.String(), string(lines), string(deps))
		if err != nil {
			return fmt.Errorf("insert invoice: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return invoicing.ErrAlreadyIssued // the rollback gives the number back
		}
		inv.Number = number
		return nil
	})
}

// RecordRun implements invoicing.Repository.
func (s *Store) RecordRun(ctx context.Context, p taxperiod.Period, zone string, completedAt time.Time, issued int) error {
	if _, err := s.Pool.Exec(ctx, `insert into ledger.invoice_runs (period, time_zone, period_start, period_end, completed_at, issued)
		values ($1, $2, $3, $4, $5, $6) on conflict (period) do nothing`, p.ID, zone, p.Start, p.End, completedAt, issued); err != nil {
		return fmt.Errorf("record invoice run of %s: %w", p.ID, err)
	}
	return nil
}

const invoiceCols = `invoice_id, number, renter_id, currency, period, time_zone, period_start, period_end, issued_at,
	opening_balance::text, deposits::text, charges::text, adjustments::text, closing_balance::text,
	tier_discounts::text, surcharges::text, lines, deposit_entries`

// Get implements invoicing.Repository.
func (s *Store) Get(ctx context.Context, id string) (domain.Invoice, error) {
	rows, err := s.Pool.Query(ctx, `select `+invoiceCols+` from ledger.invoices where invoice_id = $1`, id)
	if err != nil {
		return domain.Invoice{}, fmt.Errorf("invoice %s: %w", id, err)
	}
	inv, err := pgx.CollectExactlyOneRow(rows, scanInvoice)
	if errors.Is(err, pgx.ErrNoRows) {
		return domain.Invoice{}, fmt.Errorf("invoice %s: %w", id, apperr.ErrNotFound)
	}
	return inv, err
}

// ListByRenter implements invoicing.Repository.
func (s *Store) ListByRenter(ctx context.Context, renterID, currency string, after *invoicing.Position, limit int) ([]domain.Invoice, error) {
	pos := invoicing.Position{Period: "9999-99"}
	if after != nil {
		pos = *after
	}
	rows, err := s.Pool.Query(ctx, `select `+invoiceCols+` from ledger.invoices
		where renter_id = $1 and ($2 = '' or currency = $2)
		  and (period < $3 or (period = $3 and (currency, invoice_id) > ($4, $5)))
		order by period desc, currency, invoice_id limit $6`,
		renterID, currency, pos.Period, pos.Currency, pos.ID, limit)
	if err != nil {
		return nil, fmt.Errorf("invoices of %s: %w", renterID, err)
	}
	return pgx.CollectRows(rows, scanInvoice)
}

type lineRow struct {
	Kind         string `json:"kind"`
	GPUModel     string `json:"gpu_model,omitempty"`
	Band         string `json:"band,omitempty"`
	Tier         string `json:"tier,omitempty"`
	GPUHours     string `json:"gpu_hours"`
	Amount       string `json:"amount"`
	TierDiscount string `json:"tier_discount"`
}

type depositRow struct {
	TransactionID string    `json:"transaction_id"`
	PostedAt      time.Time `json:"posted_at"`
	Amount        string    `json:"amount"`
	Reference     string    `json:"reference,omitempty"`
}

func toLineRows(ls []domain.InvoiceLine) []lineRow {
	out := make([]lineRow, 0, len(ls))
	for _, l := range ls {
		out = append(out, lineRow{Kind: l.Kind, GPUModel: l.GPUModel, Band: l.Band, Tier: l.Tier,
			GPUHours: l.GPUHours.String(), Amount: l.Amount.String(), TierDiscount: l.TierDiscount.String()})
	}
	return out
}

func toDepositRows(ds []domain.InvoiceDeposit) []depositRow {
	out := make([]depositRow, 0, len(ds))
	for _, d := range ds {
		out = append(out, depositRow{TransactionID: d.TransactionID, PostedAt: d.PostedAt, Amount: d.Amount.String(), Reference: d.Reference})
	}
	return out
}

func scanInvoice(r pgx.CollectableRow) (domain.Invoice, error) {
	var inv domain.Invoice
	var amounts [8]string
	var lines, deps []byte
	if err := r.Scan(&inv.ID, &inv.Number, &inv.RenterID, &inv.Currency, &inv.Period, &inv.TimeZone,
		&inv.PeriodStart, &inv.PeriodEnd, &inv.IssuedAt, &amounts[0], &amounts[1], &amounts[2], &amounts[3],
		&amounts[4], &amounts[5], &amounts[6], &lines, &deps); err != nil {
		return inv, err
	}
	dst := []*decimal.Decimal{&inv.Opening, &inv.Deposits, &inv.Charges, &inv.Adjustments, &inv.Closing, &inv.TierDiscounts, &inv.Surcharges}
	for i, d := range dst {
		v, err := decimal.NewFromString(amounts[i])
		if err != nil {
			return inv, fmt.Errorf("invoice %s amount %q: %w", inv.ID, amounts[i], err)
		}
		*d = v
	}
	var lrs []lineRow
	if err := json.Unmarshal(lines, &lrs); err != nil {
		return inv, fmt.Errorf("invoice %s lines: %w", inv.ID, err)
	}
	for _, l := range lrs {
		var vals [3]decimal.Decimal
		for i, s := range []string{l.GPUHours, l.Amount, l.TierDiscount} {
			v, err := decimal.NewFromString(s)
			if err != nil {
				return inv, fmt.Errorf("invoice %s line %q: %w", inv.ID, s, err)
			}
			vals[i] = v
		}
		inv.Lines = append(inv.Lines, domain.InvoiceLine{Kind: l.Kind, GPUModel: l.GPUModel, Band: l.Band, Tier: l.Tier,
			GPUHours: vals[0], Amount: vals[1], TierDiscount: vals[2]})
	}
	var drs []depositRow
	if err := json.Unmarshal(deps, &drs); err != nil {
		return inv, fmt.Errorf("invoice %s deposits: %w", inv.ID, err)
	}
	for _, d := range drs {
		v, err := decimal.NewFromString(d.Amount)
		if err != nil {
			return inv, fmt.Errorf("invoice %s deposit %q: %w", inv.ID, d.Amount, err)
		}
		inv.DepositEntries = append(inv.DepositEntries, domain.InvoiceDeposit{TransactionID: d.TransactionID, PostedAt: d.PostedAt, Amount: v, Reference: d.Reference})
	}
	return inv, nil
}
