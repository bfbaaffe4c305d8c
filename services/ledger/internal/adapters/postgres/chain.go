package postgres

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// chainBatchMax bounds the transactions chained (or verified) per round.
const chainBatchMax = 5000

// Chain is app.HashChain on the ledger's journal.
type Chain struct {
	Pool *pgxpool.Pool
	// Written (optional) is the store's: the transactions it holds are
	// hashed from there, the others read back from the journal.
	Written *Written
}

var _ app.HashChain = Chain{}

// Extend is ChainStep on the pool.
func (c Chain) Extend(ctx context.Context) (int, error) { return ChainStep(ctx, c.Pool, c.Written) }

// ChainStep appends the next final transactions to the hash chain and returns
// how many it chained. Writers never wait for it: a transaction is chained
// once its Postgres xid is below the xmin of the current snapshot, when no
// transaction that could still commit can sort before it, so the (xid, id)
// order of the chain never changes after the fact. One chainer runs at a time
// (a transaction-scoped advisory lock). The transactions w holds (this
// process wrote them) are hashed as they were written; the others are read
// back.
func ChainStep(ctx context.Context, pool *pgxpool.Pool, w *Written) (int, error) {
	n := 0
	var chained []string
	err := pg.InTx(ctx, pool, func(tx pgx.Tx) error {
		var leader bool
		if err := tx.QueryRow(ctx, `select pg_try_advisory_xact_lock(hashtext('gpubill.ledger.chain'))`).Scan(&leader); err != nil {
			return err
		}
		if !leader {
			return nil
		}
		pos, prev, lastXid, lastID := int64(0), domain.GenesisHash, uint64(0), zeroUUID
		err := tx.QueryRow(ctx, `select position, hash, xid, tx_id::text from ledger.journal_chain
			order by position desc limit 1`).Scan(&pos, &prev, &lastXid, &lastID)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("chain head: %w", err)
		}
		// Order by the columns, qualified: a bare "order by xid" names the
		// output column xid::text, and text order puts xid 1003 before 999,
		// so a round spanning a power of ten chained out of order and the
		// next round tried to chain 1003 again (stuck for good).
		rows, err := tx.Query(ctx, `select t.id::text, t.xid from ledger.transactions t
			where (t.xid, t.id) > ($1::xid8, $2::uuid) and t.xid < pg_snapshot_xmin(pg_current_snapshot())
			order by t.xid, t.id limit $3`, lastXid, lastID, chainBatchMax)
		if err != nil {
			return fmt.Errorf("chain candidates: %w", err)
		}
		var ids []string
		var xids []uint64
		for rows.Next() {
			var id string
			var x uint64
			if err := rows.Scan(&id, &x); err != nil {
				return err
			}
			ids, xids = append(ids, id), append(xids, x)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(ids) == 0 {
			return nil
		}
		held, err := toChain(ctx, tx, w, ids)
		if err != nil {
			return err
		}
		if err := appendLinks(ctx, tx, held, ids, xids, pos, prev); err != nil {
			return err
		}
		n, chained = len(ids), ids
		return nil
	})
	if err == nil {
		w.drop(chained)
	}
	return n, err
}

// appendLinks hashes the transactions ids names (held) after the link at
// position pos with hash prev, and appends their links to the chain by
// COPY: a page of links per heap WAL record.
func appendLinks(ctx context.Context, tx pgx.Tx, held map[string]*domain.Transaction, ids []string, xids []uint64, pos int64, prev []byte) error {
	links := make([][]any, len(ids))
	for i, id := range ids {
		t := held[id]
		if t == nil {
			return fmt.Errorf("chain: transaction %s not loaded", id)
		}
		tid, err := uuid.Parse(id)
		if err != nil {
			return fmt.Errorf("chain: transaction id %q: %w", id, err)
		}
		pos++
		h := domain.ChainHash(prev, *t)
		links[i] = []any{pos, pgtype.UUID{Bytes: tid, Valid: true}, xids[i], prev, h}
		prev = h
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{Schema, "journal_chain"},
		[]string{"position", "tx_id", "xid", "prev_hash", "hash"}, pgx.CopyFromRows(links)); err != nil {
		return fmt.Errorf("append chain: %w", err)
	}
	return nil
}

// toChain returns the transactions ids names: those w holds as this
// process wrote them, the others read back from the journal.
func toChain(ctx context.Context, tx pgx.Tx, w *Written, ids []string) (map[string]*domain.Transaction, error) {
	held, missing := w.take(ids)
	loaded, err := LoadTransactions(ctx, tx, missing)
	if err != nil {
		return nil, err
	}
	if len(loaded) != len(missing) {
		return nil, fmt.Errorf("chain: loaded %d of %d transactions", len(loaded), len(missing))
	}
	for _, t := range loaded {
		held[t.ID] = t
	}
	return held, nil
}

// ChainHead returns the hash (hex) and position of the chain's last link.
func ChainHead(ctx context.Context, q Querier) (string, int64, error) {
	var h []byte
	var pos int64
	err := q.QueryRow(ctx, `select hash, position from ledger.journal_chain order by position desc limit 1`).Scan(&h, &pos)
	if errors.Is(err, pgx.ErrNoRows) {
		return hex.EncodeToString(domain.GenesisHash), 0, nil
	}
	return hex.EncodeToString(h), pos, err
}

// chainLink is a row of ledger.journal_chain.
type chainLink struct {
	pos        int64
	id         string
	prev, hash []byte
}

// readLinks reads the chain's next page of links after position after.
func readLinks(ctx context.Context, q Querier, after int64) ([]chainLink, error) {
	rows, err := q.Query(ctx, `select position, tx_id::text, prev_hash, hash from ledger.journal_chain
		where position > $1 order by position limit $2`, after, chainBatchMax)
	if err != nil {
		return nil, fmt.Errorf("read chain: %w", err)
	}
	defer rows.Close()
	var links []chainLink
	for rows.Next() {
		var l chainLink
		if err := rows.Scan(&l.pos, &l.id, &l.prev, &l.hash); err != nil {
			return nil, err
		}
		links = append(links, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read chain: %w", err)
	}
	return links, nil
}

// VerifyResult is the outcome of walking the chain.
type VerifyResult struct {
	OK        bool   `json:"ok"`
	Checked   int64  `json:"checked"`   // links verified
	Unchained int64  `json:"unchained"` // transactions not chained yet
	HeadHash  string `json:"head_hash"`
	// The first link that does not verify.
	FirstBadTransaction string `json:"first_bad_transaction,omitempty"`
	FirstBadPosition    int64  `json:"first_bad_position,omitempty"`
	// The first balance (account and currency) its postings do not sum to.
	BadBalance string `json:"bad_balance,omitempty"`
	// The first record the segregated-funds report reads besides the
	// journal (a recorded breach, a balance checkpoint) that the journal
	// does not give.
	BadReportRecord string `json:"bad_report_record,omitempty"`
	// The audit log's chain (ledger.audit_events): records verified, the
	// last one's seq and hash, the seq of the first record that does not
	// verify.
	AuditChecked     int64  `json:"audit_checked"`
	AuditHeadSeq     int64  `json:"audit_head_seq"`
	AuditHeadHash    string `json:"audit_head_hash"`
	FirstBadAuditSeq int64  `json:"first_bad_audit_seq,omitempty"`
	Reason           string `json:"reason,omitempty"`
}

// Verify recomputes every link from the journal's current content and names
// the first transaction whose content or link no longer matches; then the
// audit log's chain (verifyAudit).
func Verify(ctx context.Context, q Querier) (VerifyResult, error) {
	res := VerifyResult{OK: true, HeadHash: hex.EncodeToString(domain.GenesisHash)}
	prev := domain.GenesisHash
	after := int64(0)
	var breachTx, breachReason string // the first chained transaction whose recorded breaches differ
	rule, err := breachRuleOf(ctx, q)
	if err != nil {
		return res, err
	}
	for {
		links, err := readLinks(ctx, q, after)
		if err != nil {
			return res, err
		}
		if len(links) == 0 {
			break
		}
		ids := make([]string, len(links))
		for i, l := range links {
			ids[i] = l.id
		}
		txs, err := LoadTransactions(ctx, q, ids)
		if err != nil {
			return res, err
		}
		byID := make(map[string]*domain.Transaction, len(txs))
		for _, t := range txs {
			byID[t.ID] = t
		}
		if breachTx == "" && len(txs) == len(ids) {
			if breachTx, breachReason, err = breachMismatch(ctx, q, ids, byID, rule); err != nil {
				return res, err
			}
		}
		for _, l := range links {
			bad := func(reason string) (VerifyResult, error) {
				res.OK, res.FirstBadTransaction, res.FirstBadPosition, res.Reason = false, l.id, l.pos, reason
				return res, nil
			}
			if l.pos != after+1 {
				return bad(fmt.Sprintf("chain position %d follows %d: links are missing", l.pos, after))
			}
			if !bytes.Equal(l.prev, prev) {
				return bad("prev_hash does not match the previous link")
			}
			t := byID[l.id]
			if t == nil {
				return bad("transaction is missing from the journal")
			}
			if h := domain.ChainHash(prev, *t); !bytes.Equal(h, l.hash) {
				return bad("content no longer matches its hash (altered transaction or postings)")
			}
			prev, after = l.hash, l.pos
			res.Checked++
			res.HeadHash = hex.EncodeToString(l.hash)
		}
	}
	res, err = verifyBeyondTheChain(ctx, q, res)
	if err != nil || !res.OK {
		return res, err
	}
	if breachTx != "" {
		res.OK, res.BadReportRecord, res.Reason = false, "breach of "+breachTx, breachReason
		return res, nil
	}
	if res, err = verifyBreachesBelong(ctx, q, res); err != nil || !res.OK {
		return res, err
	}
	return verifyCheckpointsAndAudit(ctx, q, res)
}

// verifyCheckpointsAndAudit checks the balance checkpoints, then the audit
// log's chain.
func verifyCheckpointsAndAudit(ctx context.Context, q Querier, res VerifyResult) (VerifyResult, error) {
	res, err := verifyCheckpoints(ctx, q, res)
	if err != nil || !res.OK {
		return res, err
	}
	return verifyAudit(ctx, q, res)
}

// verifyBeyondTheChain counts the transactions not chained yet and checks
// what the chain does not hash: reversal links, postings of no transaction
// or not at its time, then the balances.
func verifyBeyondTheChain(ctx context.Context, q Querier, res VerifyResult) (VerifyResult, error) {
	if err := q.QueryRow(ctx, `select count(*) from ledger.transactions t
		where not exists (select 1 from ledger.journal_chain c where c.tx_id = t.id)`).Scan(&res.Unchained); err != nil {
		return res, err
	}
	res, err := verifyBehindTheHead(ctx, q, res)
	if err != nil || !res.OK {
		return res, err
	}
	if res, err = verifyReversalLinks(ctx, q, res); err != nil || !res.OK {
		return res, err
	}
	if res, err = verifyPostingsBelong(ctx, q, res); err != nil || !res.OK {
		return res, err
	}
	return verifyBalances(ctx, q, res)
}

// verifyPostingsBelong names the first posting whose transaction is not in
// the journal, or whose created_at is not its transaction's. The chain
// hashes a transaction's postings by its id, so one inserted under another
// id (an INSERT the tables' owner may run; postings refuse only updates and
// deletes), with its balance raised to match, changed every figure and
// passed verification. Nor does it hash a posting's created_at, which every
// as-of figure reads (reports, balances as of, invoices, reconciliation,
// checkpoints): every writer gives a posting its transaction's created_at,
// which the chain does hash, so one that differs was moved (an UPDATE with
// the immutability trigger disabled) and passed. One statement, one scan of
// the postings: the join the first check needed anyway gives the time.
func verifyPostingsBelong(ctx context.Context, q Querier, res VerifyResult) (VerifyResult, error) {
	var tx, account string
	var idx int
	var at time.Time
	var txAt *time.Time // nil: the transaction is not in the journal
	err := q.QueryRow(ctx, `select p.tx_id::text, p.idx, p.account, p.created_at, t.created_at
		from ledger.postings p left join ledger.transactions t on t.id = p.tx_id
		where t.id is null or p.created_at <> t.created_at order by 1, 2 limit 1`).Scan(&tx, &idx, &account, &at, &txAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return res, nil
	}
	if err != nil {
		return res, fmt.Errorf("verify postings: %w", err)
	}
	res.OK, res.FirstBadTransaction = false, tx
	if txAt == nil {
		res.Reason = fmt.Sprintf("posting %d to %s names transaction %s, which is not in the journal (ledger.postings altered)", idx, account, tx)
		return res, nil
	}
	res.Reason = fmt.Sprintf("posting %d to %s was created at %s; its transaction at %s (ledger.postings altered: every as-of figure reads the posting's time)",
		idx, account, at.UTC().Format(time.RFC3339Nano), txAt.UTC().Format(time.RFC3339Nano))
	return res, nil
}

// verifyBehindTheHead names the first transaction that sorts before the
// chain's head in (xid, id) order and is not chained. The chain takes a
// transaction only once every transaction id before it has finished, so such
// a one is never chained: its database was moved (pg_dump, logical
// replication) into a cluster whose transaction ids are behind the journal's.
// It was counted as not chained yet, and verify passed while nothing new was
// ever hashed.
func verifyBehindTheHead(ctx context.Context, q Querier, res VerifyResult) (VerifyResult, error) {
	var id string
	var n int64
	err := q.QueryRow(ctx, `select coalesce(min(t.id::text), ''), count(*) from ledger.transactions t,
			(select xid, tx_id from ledger.journal_chain order by position desc limit 1) h
		where (t.xid, t.id) < (h.xid, h.tx_id) and not exists (select 1 from ledger.journal_chain c where c.tx_id = t.id)`).Scan(&id, &n)
	if err != nil {
		return res, fmt.Errorf("verify transactions behind the chain's head: %w", err)
	}
	if n == 0 {
		return res, nil
	}
	res.OK, res.FirstBadTransaction = false, id
	res.Reason = fmt.Sprintf("%d transaction(s) sort before the chain's head (their transaction ids are older than its) and are not chained: "+
		"they never will be (the database was moved into a cluster whose transaction ids are behind the journal's; "+
		"gpubill restore advances them)", n)
	return res, nil
}

// LinkHash is the hex hash of the chain's link at position.
func LinkHash(ctx context.Context, q Querier, position int64) (string, error) {
	var h []byte
	err := q.QueryRow(ctx, `select hash from ledger.journal_chain where position = $1`, position).Scan(&h)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("the chain has no link at position %d", position)
	}
	if err != nil {
		return "", fmt.Errorf("read the chain's link at %d: %w", position, err)
	}
	return hex.EncodeToString(h), nil
}

// verifyBalancesSQL names the first balance (ledger.balances, which the chain
// does not hash: it must stay writable) whose debits or credits are not the
// sum of the account's postings in its currency, or a posting's account and
// currency without a balance; one statement, so one snapshot.
const verifyBalancesSQL = `select coalesce(b.account, p.account), coalesce(b.currency, p.currency),
		coalesce(b.debits, 0)::text, coalesce(b.credits, 0)::text, coalesce(p.debits, 0)::text, coalesce(p.credits, 0)::text
	from ledger.balances b
	full join (select account, currency, coalesce(sum(amount) filter (where direction = 'debit'), 0) as debits,
			coalesce(sum(amount) filter (where direction = 'credit'), 0) as credits
		from ledger.postings group by account, currency) p on p.account = b.account and p.currency = b.currency
	where coalesce(b.debits, 0) <> coalesce(p.debits, 0) or coalesce(b.credits, 0) <> coalesce(p.credits, 0)
	order by 1, 2 limit 1`

// verifyBalances checks the maintained balances against the postings: a
// payout's check of available, an overdraft refusal and every balance of
// now read them, and an edit of one (an UPDATE the role that owns the
// tables may run) passed verification while the journal stayed intact.
func verifyBalances(ctx context.Context, q Querier, res VerifyResult) (VerifyResult, error) {
	var account, currency, debits, credits, postedDebits, postedCredits string
	err := q.QueryRow(ctx, verifyBalancesSQL).Scan(&account, &currency, &debits, &credits, &postedDebits, &postedCredits)
	if errors.Is(err, pgx.ErrNoRows) {
		return res, nil
	}
	if err != nil {
		return res, fmt.Errorf("verify balances: %w", err)
	}
	res.OK, res.BadBalance = false, account+" "+currency
	res.Reason = fmt.Sprintf("balance of %s in %s holds debits %s, credits %s; its postings sum to debits %s, credits %s (ledger.balances altered)",
		account, currency, debits, credits, postedDebits, postedCredits)
	return res, nil
}

// verifyReversalLinks checks ledger.reversals, which the chain does not
// hash, against what it does: a reversal transaction names the transaction
// it mirrors in its hashed metadata ("reverses"), so a link row that is
// missing, points elsewhere, or links a transaction that is not a reversal
// has been altered.
func verifyReversalLinks(ctx context.Context, q Querier, res VerifyResult) (VerifyResult, error) {
	var id, reason string
	err := q.QueryRow(ctx, `select id, reason from (
			select t.id::text as id, case when r.reversal_id is null then 'reversal has no link to the transaction it reverses'
				else 'reversal link names ' || r.original_id::text || ', its hashed metadata ' || coalesce(t.metadata->>'reverses', 'nothing') end as reason
			from ledger.transactions t left join ledger.reversals r on r.reversal_id = t.id
			where t.kind = 'reversal' and (r.reversal_id is null or t.metadata->>'reverses' is distinct from r.original_id::text)
			union all
			select r.reversal_id::text, 'reversal link from ' || r.original_id::text || ' names a transaction that is not a reversal'
			from ledger.reversals r left join ledger.transactions t on t.id = r.reversal_id
			where t.id is null or t.kind <> 'reversal'
		) bad order by id limit 1`).Scan(&id, &reason)
	if errors.Is(err, pgx.ErrNoRows) {
		return res, nil
	}
	if err != nil {
		return res, fmt.Errorf("verify reversal links: %w", err)
	}
	res.OK, res.FirstBadTransaction, res.Reason = false, id, reason
	return res, nil
}
