package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// The segregated-funds report reads two tables the chain does not hash: the
// breaches recorded when a transaction is posted and the balance
// checkpoints an as-of report starts from. Verify derives both again from
// the journal, so an edited, removed or inserted row is named: each changed
// every report that read it while verify said ok.

// BreachRule classifies a transaction's segregation breaches.
type BreachRule func(*domain.Transaction) []domain.Breach

// breachRuleOf is the rule the journal's breaches were recorded under: by
// kind once migration ledger/0019's backfill has classified the journal
// again, by shape before (a snapshot of an earlier version, restored).
func breachRuleOf(ctx context.Context, q Querier) (BreachRule, error) {
	var done bool
	err := q.QueryRow(ctx, `select done_at is not null from ledger.report_backfills where name = $1`, backfillBreachesByKind).Scan(&done)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return domain.SegregationBreachesByShape, nil
	case err != nil:
		return nil, fmt.Errorf("breach rule: %w", err)
	case done:
		return domain.SegregationBreaches, nil
	}
	return domain.SegregationBreachesByShape, nil
}

// breachMismatch compares the breaches recorded for a batch of chained
// transactions with those their postings give, and describes the first
// difference ("" for none).
func breachMismatch(ctx context.Context, q Querier, ids []string, byID map[string]*domain.Transaction, rule BreachRule) (id, reason string, err error) {
	rows, err := q.Query(ctx, `select tx_id::text, seq, account, currency, from_pool, to_pool, amount::text, reason, effective_at, created_at
		from ledger.segregation_breaches where tx_id = any($1::uuid[]) order by tx_id, seq`, ids)
	if err != nil {
		return "", "", fmt.Errorf("read recorded breaches: %w", err)
	}
	defer rows.Close()
	recorded := map[string][]domain.RecordedBreach{}
	for rows.Next() {
		var b domain.RecordedBreach
		var seq int32
		var from, to, amount string
		if err := rows.Scan(&b.TransactionID, &seq, &b.Account, &b.Currency, &from, &to, &amount, &b.Reason, &b.EffectiveAt, &b.CreatedAt); err != nil {
			return "", "", err
		}
		if int(seq) != len(recorded[b.TransactionID]) {
			return b.TransactionID, fmt.Sprintf("recorded breach %d of the transaction follows %d recorded before it (ledger.segregation_breaches altered)",
				seq, len(recorded[b.TransactionID])), nil
		}
		b.FromPool, b.ToPool = domain.Pool(from), domain.Pool(to)
		if b.Amount, err = decimal.NewFromString(amount); err != nil {
			return "", "", fmt.Errorf("recorded breach amount %q: %w", amount, err)
		}
		recorded[b.TransactionID] = append(recorded[b.TransactionID], b)
	}
	if err := rows.Err(); err != nil {
		return "", "", fmt.Errorf("read recorded breaches: %w", err)
	}
	for _, id := range ids {
		if reason := breachDiff(byID[id], recorded[id], rule); reason != "" {
			return id, reason, nil
		}
	}
	return "", "", nil
}

// breachDiff describes how the recorded breaches differ from those t's
// postings give ("" when they agree).
func breachDiff(t *domain.Transaction, got []domain.RecordedBreach, rule BreachRule) string {
	want := rule(t)
	if len(got) != len(want) {
		return fmt.Sprintf("%d breach(es) recorded for the transaction; its postings give %d (ledger.segregation_breaches altered)", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Account != w.Account || g.Currency != w.Currency || g.FromPool != w.FromPool || g.ToPool != w.ToPool ||
			!g.Amount.Equal(w.Amount) || g.Reason != w.Reason || !g.EffectiveAt.Equal(t.EffectiveAt) || !g.CreatedAt.Equal(t.CreatedAt) {
			return fmt.Sprintf("recorded breach %d reads %s %s %s from %s to %s at %s; its postings give %s %s %s from %s to %s at %s (ledger.segregation_breaches altered)",
				i, g.Account, g.Amount, g.Currency, g.FromPool, g.ToPool, g.CreatedAt.UTC().Format(time.RFC3339Nano),
				w.Account, w.Amount, w.Currency, w.FromPool, w.ToPool, t.CreatedAt.UTC().Format(time.RFC3339Nano))
		}
	}
	return ""
}

// verifyBreachesBelong names the first recorded breach whose transaction is
// not in the journal (one inserted listed in every report).
func verifyBreachesBelong(ctx context.Context, q Querier, res VerifyResult) (VerifyResult, error) {
	var tx, account string
	err := q.QueryRow(ctx, `select b.tx_id::text, b.account from ledger.segregation_breaches b
		where not exists (select 1 from ledger.transactions t where t.id = b.tx_id) order by 1, b.seq limit 1`).Scan(&tx, &account)
	if errors.Is(err, pgx.ErrNoRows) {
		return res, nil
	}
	if err != nil {
		return res, fmt.Errorf("verify recorded breaches: %w", err)
	}
	res.OK, res.BadReportRecord = false, "breach of "+tx
	res.Reason = fmt.Sprintf("a breach on %s is recorded for transaction %s, which is not in the journal (ledger.segregation_breaches altered)", account, tx)
	return res, nil
}

// verifyCheckpointsSQL compares every balance checkpoint with the one
// before it plus the postings created between them (the first with every
// posting created at or before it), in one statement, so one snapshot (the
// checkpoint step may drop and rebuild the latest meanwhile). Checked in
// order, the first checkpoint that differs is the first whose balances are
// not the sums of the postings up to it. The checkpoints a posting committed
// late into are left out until the checkpoint step rebuilds them: no figure
// starts from them (nearestBase), and the late posting is no tampering.
const verifyCheckpointsSQL = `with h as (select at, lag(at) over (order by at) as prev from ledger.balance_checkpoints
		where at < (` + freshCheckpointsBefore + `)),
	want as (
		select h.at, x.currency, x.account, sum(x.n) as n from h cross join lateral (
			select c.currency, c.account, c.net_debit as n from ledger.checkpoint_balances c where c.at = h.prev
			union all
			select p.currency, p.account, case when p.direction = 'debit' then p.amount else -p.amount end from ledger.postings p
			where p.created_at > coalesce(h.prev, '-infinity'::timestamptz) and p.created_at <= h.at
		) x group by h.at, x.currency, x.account),
	have as (select c.at, c.currency, c.account, c.net_debit as n from ledger.checkpoint_balances c join h on h.at = c.at)
	select coalesce(have.at, want.at), coalesce(have.currency, want.currency), coalesce(have.account, want.account),
		coalesce(have.n, 0)::text, coalesce(want.n, 0)::text
	from have full join want on want.at = have.at and want.currency = have.currency and want.account = have.account
	where coalesce(have.n, 0) <> coalesce(want.n, 0)
	order by 1, 2, 3 limit 1`

// verifyCheckpoints names the first checkpoint balance that is not the sum
// of its account's postings up to the checkpoint.
func verifyCheckpoints(ctx context.Context, q Querier, res VerifyResult) (VerifyResult, error) {
	var at time.Time
	var currency, account, have, want string
	err := q.QueryRow(ctx, verifyCheckpointsSQL).Scan(&at, &currency, &account, &have, &want)
	if errors.Is(err, pgx.ErrNoRows) {
		return res, nil
	}
	if err != nil {
		return res, fmt.Errorf("verify balance checkpoints: %w", err)
	}
	stamp := at.UTC().Format(time.RFC3339Nano)
	res.OK, res.BadReportRecord = false, "checkpoint "+stamp+" "+account+" "+currency
	res.Reason = fmt.Sprintf("balance checkpoint at %s holds a net debit of %s for %s in %s; the postings up to it sum to %s "+
		"(ledger.checkpoint_balances altered, or a posting committed late into its interval with no late-posting mark: before "+
		"migration ledger/0040, or with its trigger disabled; once the postings are known good, rebuild it and the checkpoints after it: "+
		"gpubill ledger checkpoints rebuild --since %s)", stamp, have, account, currency, want, stamp)
	return res, nil
}
