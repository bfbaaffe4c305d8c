package postgres

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/audit"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// postingsInsertSQL inserts postingColumns' rows (PostNew's; Post copies
// them). An amount goes as the text StringFixed prints, so it keeps its
// scale as the copied ones do.
const postingsInsertSQL = `insert into ledger.postings (tx_id, idx, account, currency, direction, amount, created_at)
	select u.t, u.i, u.a, u.c, u.d, u.m::numeric, u.at
	from unnest($1::uuid[], $2::int4[], $3::text[], $4::text[], $5::text[], $6::text[], $7::timestamptz[])
		as u(t, i, a, c, d, m, at)`

// postingColumns are postings as postingsInsertSQL's arrays.
type postingColumns struct {
	tx        [][16]byte
	idx       []int32
	account   []string
	currency  []string
	direction []string
	amount    []string
	createdAt []time.Time
}

func (c *postingColumns) add(tid [16]byte, t *domain.Transaction, i int) {
	p := t.Postings[i]
	scale := int32(0)
	if e := p.Amount.Exponent(); e < 0 {
		scale = -e
	}
	c.tx = append(c.tx, tid)
	c.idx = append(c.idx, int32(i))
	c.account = append(c.account, p.Account.Address)
	c.currency = append(c.currency, p.Currency)
	c.direction = append(c.direction, string(p.Direction))
	c.amount = append(c.amount, p.Amount.StringFixed(scale))
	c.createdAt = append(c.createdAt, t.CreatedAt)
}

func (c *postingColumns) args() []any {
	return []any{c.tx, c.idx, c.account, c.currency, c.direction, c.amount, c.createdAt}
}

// judgedSQL raises LG001 (ledger.needs_judging) for a balance of its
// arrays (judgedArgs) that ends below zero on its normal side (side: +1
// when that is debits − credits, −1 when credits − debits), or at zero when
// or_zero. dip moves the judged point from where the balance ends to the
// lowest one the group's transactions reached, applied one at a time
// (domain.Draws: the draw less the group's net change), so an overdraft is
// judged where it happened, not on the group's net change.
const judgedSQL = `select ledger.needs_judging(b.account, b.currency)
	from unnest($1::text[], $2::text[], $3::int4[], $4::bool[], $5::text[]) as u(a, c, side, or_zero, dip)
	join ledger.balances b on b.account = u.a and b.currency = u.c
	where (b.debits - b.credits) * u.side + u.dip::numeric < 0 or (u.or_zero and b.debits = b.credits)`

// judgedArgs are judgedSQL's arguments for the balances of aggs that need
// judging if they end low enough (domain.NeedsJudging; draws:
// domain.Draws of the write's transactions); nil when none can.
func judgedArgs(keys []balKey, aggs map[balKey]*agg, draws map[domain.BalanceKey]decimal.Decimal) []any {
	var accounts, currencies, dips []string
	var sides []int32
	var orZero []bool
	for _, k := range keys {
		a := aggs[k]
		delta := a.acc.NormalBalance(a.debits, a.credits)
		low, drawn := draws[domain.BalanceKey{Address: k.account, Currency: k.currency}]
		judge, z := domain.NeedsJudging(a.acc, delta, drawn)
		if !judge {
			continue
		}
		side := int32(-1)
		if a.acc.DebitNormal() {
			side = 1
		}
		dip := decimal.Zero
		if drawn {
			dip = low.Sub(delta)
		}
		accounts, currencies, sides, orZero = append(accounts, k.account), append(currencies, k.currency), append(sides, side), append(orZero, z)
		dips = append(dips, dip.String())
	}
	if accounts == nil {
		return nil
	}
	return []any{accounts, currencies, sides, orZero, dips}
}

// PostNew writes txs as Tx.Post does, when it can take every one as new, in
// one round trip instead of one per statement: BEGIN, the write's statements
// (journal rows, accounts on first use, postings, ledger.posted with the
// audit records the writes took (audited), the balance upsert), a look at the balances a judge would have to see
// (judgedSQL) and COMMIT go to Postgres as one pipeline. An API group
// commit holds the hot balance rows (bank:client) from the upsert to the
// commit, and every round trip waits for both the database and this process
// to be scheduled: the group's statements are the path every API write
// queues behind.
//
// app.ErrUsePost, with nothing written, when an idempotency key exists
// (the journal's unique key refuses the insert; Post skips such rows), a
// balance needs judging (an overdraft or a wallet's depletion: Post's
// caller judges the changes before its commit) or a transaction records a
// segregation breach.
func (s *Store) PostNew(ctx context.Context, txs []*domain.Transaction, audited []app.Audited) ([]domain.BalanceChange, error) {
	for _, x := range txs {
		if len(domain.SegregationBreaches(x)) > 0 {
			return nil, app.ErrUsePost
		}
	}
	sorted := make([]*domain.Transaction, len(txs))
	copy(sorted, txs)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].IdempotencyKey < sorted[j].IdempotencyKey })
	journal, err := journalRows(sorted)
	if err != nil {
		return nil, err
	}
	var postings postingColumns
	aggs, err := sumPostings(txs, postings.add)
	if err != nil {
		return nil, err
	}
	keys := sortedKeys(aggs)

	b := &pgx.Batch{}
	b.Queue("begin")
	timeout := serverTimeout(ctx)
	if timeout != "" {
		b.Queue(`select set_config('statement_timeout', $1, true)`, timeout)
	}
	b.Queue(journalInsertSQL, journalArrays(journal)...)
	if args := s.unknownAccounts(keys, aggs); args != nil {
		b.Queue(accountsInsertSQL, args...)
	}
	b.Queue(postingsInsertSQL, postings.args()...)
	if args := burnArgs(txs); args != nil {
		b.Queue(burnUpsertSQL, args...)
	}
	audits, claims := auditMessages(audited)
	if err := outbox.Queue(ctx, b, Schema, append(postedEvents(txs), audits...)...); err != nil {
		return nil, err
	}
	upsert := b.Len()
	b.Queue(balancesUpsertSQL, balanceArgs(keys, aggs)...)
	if args := judgedArgs(keys, aggs, domain.Draws(txs)); args != nil {
		b.Queue(judgedSQL, args...)
	}
	b.Queue("commit")

	conn, err := s.Pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("post: %w", err)
	}
	defer conn.Release() // a connection left inside a transaction is closed, not pooled
	changes, err := sendWrite(ctx, conn, b, upsert, aggs)
	if err != nil {
		return nil, writeFailed(ctx, conn, err, timeout)
	}
	var written []*domain.Transaction
	for _, x := range txs {
		if c := writtenCopy(x); c != nil {
			written = append(written, c)
		}
	}
	s.Written.put(written)
	for _, c := range claims {
		c.Stored()
	}
	outbox.Wake(Schema) // as the audit recorder does after storing a record
	return changes, nil
}

// writeFailed rolls back PostNew's failed write on conn and is its error
// (err): app.ErrUsePost for a key that exists or a balance to judge; one
// that is context.DeadlineExceeded when the statement_timeout of ctx's
// deadline (timeout, "" without one) ended it on the server.
func writeFailed(ctx context.Context, conn *pgxpool.Conn, err error, timeout string) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	_, rerr := conn.Exec(rctx, "rollback")
	cancel()
	if rerr != nil {
		err = errors.Join(err, fmt.Errorf("rollback: %w", rerr))
	}
	switch {
	case pg.IsUniqueViolation(err) || pg.HasCode(err, needsJudging):
		return app.ErrUsePost
	case timeout != "" && pg.HasCode(err, "57014"): // query_canceled: the statement_timeout of ctx's deadline
		return fmt.Errorf("post: %w (the server's statement_timeout of %s ms): %w", context.DeadlineExceeded, timeout, err)
	}
	return err
}

// rollbackTimeout bounds PostNew's ROLLBACK after a failed write (its
// context may have ended): a database that does not answer it leaves the
// connection to be closed, not pooled, instead of holding the writer.
const rollbackTimeout = 2 * time.Second

// serverTimeout is the statement_timeout (milliseconds, as set_config
// takes it) that ends PostNew's statements on the server by ctx's deadline
// (an API write group's, app.GroupTimeout); "" without one. A
// client that gives up only closes its connection: the pipeline, its
// COMMIT included, has gone to the server already, and a statement blocked
// on a lock would go on without it, holding what it had locked, and
// commit once the lock was released, long after its callers were answered.
// statement_timeout bounds each statement, not the transaction: a group
// whose statements each waited just under the time left can still commit
// after its callers were answered 503 (their retries, by the same keys,
// then answer what it posted).
func serverTimeout(ctx context.Context) (ms string) {
	dl, ok := ctx.Deadline()
	if !ok {
		return ""
	}
	return strconv.FormatInt(max(time.Until(dl).Milliseconds(), 1), 10)
}

// auditMessages are the audit records of audited that belong in this
// schema's outbox, joined into one message (audit.Join), and their claims
// (to mark stored once the write commits); the others' interceptors store
// them.
func auditMessages(audited []app.Audited) ([]outbox.Message, []*audit.Claim) {
	var msgs []outbox.Message
	var claims []*audit.Claim
	for _, au := range audited {
		if au.Claim.Schema() == Schema {
			msgs, claims = append(msgs, au.Message), append(claims, au.Claim)
		}
	}
	return audit.Join(msgs), claims
}

// needsJudging is the SQLSTATE ledger.needs_judging raises.
const needsJudging = "LG001"

// sendWrite sends PostNew's pipeline and reads every statement's answer:
// the balance changes of the upsert (the statement at index upsert), or the
// first error. The last statement is the COMMIT: Postgres answers ROLLBACK
// to the commit of a transaction that failed.
func sendWrite(ctx context.Context, conn *pgxpool.Conn, b *pgx.Batch, upsert int, aggs map[balKey]*agg) (changes []domain.BalanceChange, err error) {
	br := conn.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("post: %w", cerr)
		}
	}()
	for i := range b.Len() {
		if i == upsert {
			rows, err := br.Query()
			if err != nil {
				return nil, fmt.Errorf("update balances: %w", err)
			}
			if changes, err = balanceChanges(rows, aggs); err != nil {
				return nil, err
			}
			continue
		}
		tag, err := br.Exec()
		if err != nil {
			return nil, fmt.Errorf("post: %w", err)
		}
		if i == b.Len()-1 && tag.String() != "COMMIT" {
			return nil, fmt.Errorf("post: %w", pgx.ErrTxCommitRollback)
		}
	}
	return changes, nil
}
