package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// A wallet's burn rate is read from ledger.wallet_burn (migration
// ledger/0014): the debits of charge transactions per account, currency
// and minute of creation, kept by every write that posts a charge.

// burnMinute is the wallet_burn minute of a posting created at t: t
// truncated to its minute, as the postings' created_at column holds t
// (microseconds, truncated).
func burnMinute(t time.Time) time.Time { return t.UTC().Truncate(time.Minute) }

// burnUpsertSQL adds burnArgs' sums to their minutes, in key order (the
// order every writer locks the rows in).
const burnUpsertSQL = `insert into ledger.wallet_burn as b (account, currency, minute, amount)
	select u.a, u.c, u.m, u.x::numeric
	from unnest($1::text[], $2::text[], $3::timestamptz[], $4::text[]) with ordinality as u(a, c, m, x, n)
	order by u.n
	on conflict (account, currency, minute) do update set amount = b.amount + excluded.amount`

// burnArgs are burnUpsertSQL's arguments for the debits of the charge
// transactions among txs, summed per (account, currency, minute); nil when
// txs holds no charge.
func burnArgs(txs []*domain.Transaction) []any {
	type key struct {
		account, currency string
		minute            time.Time
	}
	sums := map[key]decimal.Decimal{}
	for _, t := range txs {
		if t.Kind != domain.TxCharge {
			continue
		}
		m := burnMinute(t.CreatedAt)
		for _, p := range t.Postings {
			if p.Direction == domain.Debit {
				k := key{p.Account.Address, p.Currency, m}
				sums[k] = sums[k].Add(p.Amount)
			}
		}
	}
	if len(sums) == 0 {
		return nil
	}
	keys := make([]key, 0, len(sums))
	for k := range sums {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int {
		return cmp.Or(strings.Compare(a.account, b.account), strings.Compare(a.currency, b.currency), a.minute.Compare(b.minute))
	})
	accounts, currencies, minutes, amounts := make([]string, len(keys)), make([]string, len(keys)), make([]time.Time, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		accounts[i], currencies[i], minutes[i], amounts[i] = k.account, k.currency, k.minute, sums[k].String()
	}
	return []any{accounts, currencies, minutes, amounts}
}

// burnKeep is how long wallet_burn keeps a minute: the burn window
// (app.BurnWindow, an hour) with room for writers' clocks to differ.
const burnKeep = 2 * time.Hour

// PruneBurn deletes the wallet_burn minutes older than burnKeep before now
// and returns how many rows it deleted.
func PruneBurn(ctx context.Context, q Querier, now time.Time) (int64, error) {
	tag, err := q.Exec(ctx, `delete from ledger.wallet_burn where minute < $1`, now.Add(-burnKeep))
	if err != nil {
		return 0, fmt.Errorf("prune wallet burn: %w", err)
	}
	return tag.RowsAffected(), nil
}

// BurnFromJournalSQL adds to wallet_burn the charge debits the journal
// holds from the last burnKeep ($1: now), as migration ledger/0014 did: for
// a journal written without the ledger (ledgerhistory), into an empty
// wallet_burn.
const BurnFromJournalSQL = `insert into ledger.wallet_burn (account, currency, minute, amount)
	select p.account, p.currency, date_bin('1 minute', p.created_at, timestamptz '2000-01-01 00:00:00+00'), sum(p.amount)
	from ledger.postings p join ledger.transactions t on t.id = p.tx_id
	where t.kind = 'charge' and p.direction = 'debit' and p.created_at >= $1::timestamptz - interval '2 hours'
	group by 1, 2, 3`
