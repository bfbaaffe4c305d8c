package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// CurrencyFigure is one currency's totals over every account's balance.
type CurrencyFigure struct {
	Currency   string          `json:"currency"`
	Accounts   int64           `json:"accounts"`
	Debits     decimal.Decimal `json:"debits"`
	Credits    decimal.Decimal `json:"credits"`
	BankClient decimal.Decimal `json:"bank_client"` // bank:client on its normal (debit) side
}

// Figures identify the ledger's content at one snapshot: what a backup's
// manifest records and a restore must find again.
type Figures struct {
	HeadHash     string           `json:"journal_head_hash"`
	HeadPosition int64            `json:"journal_head_position"`
	Transactions int64            `json:"transactions"`
	Postings     int64            `json:"postings"`
	Currencies   []CurrencyFigure `json:"currencies"`
	// BalancesSHA256 digests every (account, currency, debits, credits) row
	// in address order: equal digests mean every balance is identical.
	BalancesSHA256 string `json:"balances_sha256"`
	// XidMax is the largest Postgres transaction id a journal row carries.
	// The chain orders by it, so a restored database must hand out larger
	// ones before it takes a write.
	XidMax uint64 `json:"xid_max,string"`
}

// ReadFigures computes the figures in q's snapshot (a REPEATABLE READ
// transaction for a backup, so they describe exactly what it copies).
func ReadFigures(ctx context.Context, q Querier) (Figures, error) {
	var f Figures
	var err error
	if f.HeadHash, f.HeadPosition, err = ChainHead(ctx, q); err != nil {
		return f, fmt.Errorf("chain head: %w", err)
	}
	var xid string
	if err := q.QueryRow(ctx, `select (select count(*) from ledger.transactions), (select count(*) from ledger.postings),
			coalesce((select max(xid::text::numeric) from ledger.transactions), 0)::text`).Scan(&f.Transactions, &f.Postings, &xid); err != nil {
		return f, fmt.Errorf("journal counts: %w", err)
	}
	if f.XidMax, err = strconv.ParseUint(xid, 10, 64); err != nil {
		return f, fmt.Errorf("journal xid %q: %w", xid, err)
	}
	rows, err := q.Query(ctx, `select account, currency, debits::text, credits::text from ledger.balances order by account, currency`)
	if err != nil {
		return f, fmt.Errorf("balances: %w", err)
	}
	defer rows.Close()
	h := sha256.New()
	byCur := map[string]*CurrencyFigure{}
	for rows.Next() {
		var acc, cur, d, c string
		if err := rows.Scan(&acc, &cur, &d, &c); err != nil {
			return f, err
		}
		h.Write(fmt.Appendf(nil, "%s|%s|%s|%s\n", acc, cur, d, c)) // a hash.Hash's Write never fails
		debits, err := decimal.NewFromString(d)
		if err != nil {
			return f, fmt.Errorf("balance %s %s: %w", acc, cur, err)
		}
		credits, err := decimal.NewFromString(c)
		if err != nil {
			return f, fmt.Errorf("balance %s %s: %w", acc, cur, err)
		}
		cf := byCur[cur]
		if cf == nil {
			cf = &CurrencyFigure{Currency: cur}
			byCur[cur] = cf
		}
		cf.Accounts++
		cf.Debits = cf.Debits.Add(debits)
		cf.Credits = cf.Credits.Add(credits)
		if acc == domain.BankClient {
			cf.BankClient = debits.Sub(credits)
		}
	}
	if err := rows.Err(); err != nil {
		return f, fmt.Errorf("balances: %w", err)
	}
	f.BalancesSHA256 = hex.EncodeToString(h.Sum(nil))
	for _, cf := range byCur {
		f.Currencies = append(f.Currencies, *cf)
	}
	slices.SortFunc(f.Currencies, func(a, b CurrencyFigure) int {
		switch {
		case a.Currency < b.Currency:
			return -1
		case a.Currency > b.Currency:
			return 1
		}
		return 0
	})
	return f, nil
}
