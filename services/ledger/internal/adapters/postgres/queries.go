package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

const zeroUUID = "00000000-0000-0000-0000-000000000000"

// LoadTransactions reads transactions with their postings, links and chain
// hash, in the order of ids (missing ones are left out).
func LoadTransactions(ctx context.Context, q Querier, ids []string) ([]*domain.Transaction, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := q.Query(ctx, `select t.id::text, t.idempotency_key, t.kind, t.description, t.effective_at, t.created_at,
			t.metadata::text, coalesce(r1.original_id::text, ''), coalesce(r2.reversal_id::text, ''),
			coalesce(encode(c.hash, 'hex'), '')
		from ledger.transactions t
		left join ledger.reversals r1 on r1.reversal_id = t.id
		left join ledger.reversals r2 on r2.original_id = t.id
		left join ledger.journal_chain c on c.tx_id = t.id
		where t.id = any($1::text[]::uuid[])`, ids)
	if err != nil {
		return nil, fmt.Errorf("load transactions: %w", err)
	}
	byID := make(map[string]*domain.Transaction, len(ids))
	for rows.Next() {
		t := &domain.Transaction{}
		var kind, md string
		if err := rows.Scan(&t.ID, &t.IdempotencyKey, &kind, &t.Description, &t.EffectiveAt, &t.CreatedAt, &md,
			&t.Reverses, &t.ReversedBy, &t.Hash); err != nil {
			return nil, err
		}
		t.Kind = domain.TxKind(kind)
		t.EffectiveAt, t.CreatedAt = t.EffectiveAt.UTC(), t.CreatedAt.UTC()
		if err := json.Unmarshal([]byte(md), &t.Metadata); err != nil {
			return nil, fmt.Errorf("transaction %s metadata: %w", t.ID, err)
		}
		byID[t.ID] = t
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load transactions: %w", err)
	}
	rows, err = q.Query(ctx, `select tx_id::text, account, currency, direction, amount::text
		from ledger.postings where tx_id = any($1::text[]::uuid[]) order by tx_id, idx`, ids)
	if err != nil {
		return nil, fmt.Errorf("load postings: %w", err)
	}
	for rows.Next() {
		var id, acc, cur, dir, amt string
		if err := rows.Scan(&id, &acc, &cur, &dir, &amt); err != nil {
			return nil, err
		}
		t := byID[id]
		if t == nil {
			continue
		}
		a, err := domain.ParseAddress(acc)
		if err != nil { // written valid; keep what is there so verify can report it
			a = domain.Account{Address: acc}
		}
		d, err := decimal.NewFromString(amt)
		if err != nil {
			return nil, err
		}
		t.Postings = append(t.Postings, domain.Posting{Account: a, Direction: domain.Direction(dir), Amount: d, Currency: cur})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load postings: %w", err)
	}
	out := make([]*domain.Transaction, 0, len(ids))
	for _, id := range ids {
		if t := byID[id]; t != nil {
			out = append(out, t)
		}
	}
	return out, nil
}

// TxByKey returns the id and request hash stored under an idempotency key.
func TxByKey(ctx context.Context, q Querier, key string) (string, []byte, error) {
	var id string
	var h []byte
	err := q.QueryRow(ctx, `select id::text, request_hash from ledger.transactions where idempotency_key = $1`, key).Scan(&id, &h)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil, apperr.ErrNotFound
	}
	return id, h, err
}

func scanTotals(rows pgx.Rows) (map[string][]domain.Totals, error) {
	out := map[string][]domain.Totals{}
	for rows.Next() {
		var acc, cur, d, c string
		if err := rows.Scan(&acc, &cur, &d, &c); err != nil {
			return nil, err
		}
		dd, err := decimal.NewFromString(d)
		if err != nil {
			return nil, err
		}
		cc, err := decimal.NewFromString(c)
		if err != nil {
			return nil, err
		}
		out[acc] = append(out[acc], domain.Totals{Currency: cur, Debits: dd, Credits: cc})
	}
	return out, rows.Err()
}

// AccountTotals returns the totals of accounts per currency, now (asOf nil:
// the maintained balances) or as of an instant (summing postings up to it
// through the (account, created_at) index).
func AccountTotals(ctx context.Context, q Querier, accounts []string, asOf *time.Time) (map[string][]domain.Totals, error) {
	var rows pgx.Rows
	var err error
	if asOf == nil {
		rows, err = q.Query(ctx, `select account, currency, debits::text, credits::text
			from ledger.balances where account = any($1::text[]) order by account, currency`, accounts)
	} else {
		rows, err = q.Query(ctx, `select account, currency,
				coalesce(sum(amount) filter (where direction = 'debit'), 0)::text,
				coalesce(sum(amount) filter (where direction = 'credit'), 0)::text
			from ledger.postings where account = any($1::text[]) and created_at <= $2
			group by account, currency order by account, currency`, accounts, *asOf)
	}
	if err != nil {
		return nil, fmt.Errorf("account totals: %w", err)
	}
	return scanTotals(rows)
}

// AccountExists reports whether an account has been used.
func AccountExists(ctx context.Context, q Querier, address string) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, `select exists(select 1 from ledger.accounts where address = $1)`, address).Scan(&ok)
	return ok, err
}

// ListAccountAddresses pages through accounts whose address starts with
// prefix, after the address `after`, in address order.
func ListAccountAddresses(ctx context.Context, q Querier, prefix, after string, limit int) ([]string, error) {
	upper := prefixUpper(prefix)
	rows, err := q.Query(ctx, `select address from ledger.accounts
		where address >= $1 and ($2 = '' or address < $2) and address > $3
		order by address limit $4`, prefix, upper, after, limit)
	if err != nil {
		return nil, fmt.Errorf("list accounts: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// prefixUpper is the smallest string greater than every string with prefix
// (code point order: the C collation's byte order of UTF-8), or "" for no
// bound. It moves the last character on, never a byte: a byte moved on
// (0x7F to 0x80, 0xBF to 0xC0) was not UTF-8, and Postgres refused the
// bound, a 500 for ?prefix=¿. A prefix that is not UTF-8 is refused before.
func prefixUpper(prefix string) string {
	rs := []rune(prefix)
	for i := len(rs) - 1; i >= 0; i-- {
		next := rs[i] + 1
		if next >= 0xD800 && next <= 0xDFFF { // surrogates are no characters
			next = 0xE000
		}
		if next <= utf8.MaxRune {
			return string(rs[:i]) + string(next)
		}
	}
	return ""
}

// lateSnapshotLagMaxXIDs is how far behind the present (in transaction ids
// of the cluster, pg_snapshot_xmax) a page token's snapshot may be: its
// late part reads the journal written since, so a token older than this
// (or one forged: pkg/cursor's check is no secret) would read the journal
// back to where it points. At hundreds of writes a second across the
// cluster's services, some minutes: a client paging steadily never meets
// it, one that pauses starts its listing again.
const lateSnapshotLagMaxXIDs = 200_000

// lateWith is the common part of a listing's statement: its snapshot (cur)
// and where its late part reads from (domain.TxLate: $1 Seen, $2 Upper; seen),
// and ok: Seen and Upper are snapshots of the recent past ($5 the lag
// allowed). Without ok the late part reads nothing and the page is refused.
const lateWith = `with cur as (select pg_current_snapshot() as s),
	seen as (select nullif($1, '')::pg_snapshot as s, coalesce(nullif($2, '')::pg_snapshot, (select s from cur)) as upper),
	ok as (select $1 = '' or (pg_snapshot_xmax(seen.upper) <= pg_snapshot_xmax(cur.s)
			and pg_snapshot_xmax(seen.s) <= pg_snapshot_xmax(seen.upper)
			and pg_snapshot_xmax(cur.s)::text::numeric - pg_snapshot_xmax(seen.s)::text::numeric <= $5) as ok
		from cur, seen)`

// lateSQL is a listing's late part (domain.TxLate: $3 XID, $4 ID; at most
// $6): the transactions t (joined by join, columns cols) that match, in
// (xid, id) order. Each of its three parts is an ordered range of
// transactions_xid_idx read up to the limit: the ids Seen had running, the
// rest of XID's after ID, the ids from Seen's xmax on (below Upper's). No id
// below Seen's xmin is read (all are visible in Seen), so a session idle in
// a transaction, which holds every snapshot's xmin down, no longer makes a
// page read the journal written since it began.
func lateSQL(cols, join, match string) string {
	part := func(ids string) string {
		return `(select t.xid, t.id` + cols + ` from ledger.transactions t` + join + `
			where ` + ids + ` and (select ok from ok) and ` + match + `
				and pg_visible_in_snapshot(t.xid, (select upper from seen))
			order by t.xid, t.id limit $6)`
	}
	return `(select * from (` + part(`t.xid = any(array(select pg_snapshot_xip(s) from seen)) and t.xid > $3::xid8
				and t.xid < (select pg_snapshot_xmax(upper) from seen)`) + `
		union all ` + part(`t.xid = $3::xid8 and t.id > $4::uuid`) + `
		union all ` + part(`t.xid >= (select pg_snapshot_xmax(s) from seen) and t.xid > $3::xid8
				and t.xid < (select pg_snapshot_xmax(upper) from seen)`) + `
		) late order by xid, id limit $6)`
}

// ListTxIDsByAccount pages through the transactions that post to account, in
// (created_at, id) order after `after`, with the late ones (domain.TxPage,
// domain.TxLate) that sort at or before it, at most limit of each. The late
// ones are found from transactions_xid_idx (lateSQL), their postings read by
// their primary key (the offset keeps the account's condition out of that
// lookup: by the account's index it would scan the account's history per
// transaction).
func ListTxIDsByAccount(ctx context.Context, q Querier, account string, after *domain.TxCursor, from domain.TxLate, limit int) (domain.TxPage, error) {
	c := domain.TxCursor{CreatedAt: time.Unix(0, 0).UTC(), ID: zeroUUID}
	if after != nil {
		c = *after
	}
	rows, err := q.Query(ctx, lateWith+`
		select part, xid::text, created_at, id::text, snapshot, ok from (
		select 0 as part, null::xid8 as xid, null::timestamptz as created_at, null::uuid as id, cur.s::text as snapshot, ok.ok from cur, ok
		union all
		select 1, xid, created_at, id, null, null from `+lateSQL(`, p.created_at`, `
			cross join lateral (select p.created_at from (select account, created_at from ledger.postings
				where tx_id = t.id offset 0) p where p.account = $7 limit 1) p`,
		`(p.created_at, t.id) <= ($8, $9::uuid)`)+` l
		union all
		(select 2, null, created_at, tx_id, null, null from ledger.postings
			where account = $7 and (created_at, tx_id) > ($8, $9::uuid)
			group by created_at, tx_id order by created_at, tx_id limit $6)
		) page order by part, xid, created_at, id`, lateArgs(from, limit, account, c.CreatedAt, c.ID)...)
	if err != nil {
		return domain.TxPage{}, fmt.Errorf("list transactions: %w", err)
	}
	return scanTxPage(rows)
}

// ListTxIDs pages through every transaction in id order (UUIDv7: time order)
// after `after`, with the late ones that sort at or before it
// (domain.TxPage, domain.TxLate; CreatedAt is not read), at most limit of
// each.
func ListTxIDs(ctx context.Context, q Querier, after string, from domain.TxLate, limit int) (domain.TxPage, error) {
	if after == "" {
		after = zeroUUID
	}
	rows, err := q.Query(ctx, lateWith+`
		select part, xid::text, null::timestamptz, id::text, snapshot, ok from (
		select 0 as part, null::xid8 as xid, null::uuid as id, cur.s::text as snapshot, ok.ok from cur, ok
		union all
		select 1, xid, id, null, null from `+lateSQL(``, ``, `t.id <= $7::uuid`)+` l
		union all
		(select 2, null, id, null, null from ledger.transactions where id > $7::uuid order by id limit $6)
		) page order by part, xid, id`, lateArgs(from, limit, after)...)
	if err != nil {
		return domain.TxPage{}, fmt.Errorf("list transactions: %w", err)
	}
	return scanTxPage(rows)
}

// lateArgs are lateWith's and lateSQL's arguments ($1-$5), the limit ($6), then more.
func lateArgs(from domain.TxLate, limit int, more ...any) []any {
	id := from.ID
	if id == "" {
		id = zeroUUID
	}
	return append([]any{from.Seen, from.Upper, strconv.FormatUint(from.XID, 10), id, lateSnapshotLagMaxXIDs, limit}, more...)
}

// scanTxPage reads a listing's rows: (0, snapshot, ok), then the late ones
// (1), then the next ones (2).
func scanTxPage(rows pgx.Rows) (domain.TxPage, error) {
	defer rows.Close() // a scan that fails returns before the rows end
	var page domain.TxPage
	for rows.Next() {
		var part int
		var xid, id, snapshot *string
		var at *time.Time
		var ok *bool
		if err := rows.Scan(&part, &xid, &at, &id, &snapshot, &ok); err != nil {
			return domain.TxPage{}, fmt.Errorf("list transactions: %w", err)
		}
		if part == 0 {
			page.Snapshot, page.Refused = *snapshot, !*ok
			continue
		}
		x := domain.TxCursor{ID: *id}
		if at != nil {
			x.CreatedAt = at.UTC()
		}
		if part == 1 {
			n, err := strconv.ParseUint(*xid, 10, 64)
			if err != nil {
				return domain.TxPage{}, fmt.Errorf("list transactions: xid %q: %w", *xid, err)
			}
			x.XID = n
			page.Late = append(page.Late, x)
		} else {
			page.Next = append(page.Next, x)
		}
	}
	if err := rows.Err(); err != nil {
		return domain.TxPage{}, fmt.Errorf("list transactions: %w", err)
	}
	return page, nil
}

// TxIDsByKeys returns the ids of the transactions posted under keys, in id
// (journal) order; a key no transaction holds adds nothing.
func TxIDsByKeys(ctx context.Context, q Querier, keys []string) ([]string, error) {
	rows, err := q.Query(ctx, `select id::text from ledger.transactions where idempotency_key = any($1) order by id`, keys)
	if err != nil {
		return nil, fmt.Errorf("transactions by key: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// cycleNonZeroSQL is a page of a cycle's non-zero provider pending
// balances after a cursor (balances_cycle_idx).
const cycleNonZeroSQL = `select account, currency, (credits - debits)::text from ledger.balances
	where cycle_id = $1 and (account, currency) > ($2, $3) and credits <> debits
	order by account, currency limit $4`

// cycleZeroSQL is a page of the cycle's pending accounts that only charges
// billed at 0.00 went to (ledger.unbilled_charges; a balance, if any, of
// 0) after a cursor, read on unbilled_charges_cycle (ledger/0041: the
// cycle expression is the index's, as written there), each account's
// balance looked up once; %s is cycleZeroUpTo or nothing.
const cycleZeroSQL = `select d.account, d.currency from (select distinct (u.account collate "C") as account, u.currency
		from ledger.unbilled_charges u
		where substring(u.account from ':pending:([^:]+)$') = $1 and (u.account collate "C", u.currency) > ($2, $3)%s) d
	where not coalesce((select b.credits <> b.debits from ledger.balances b
		where b.account = d.account and b.currency = d.currency), false)
	order by 1, 2 limit $4`

// cycleZeroUpTo bounds cycleZeroSQL's read at the last non-zero balance of
// a full page: the accounts after it are the next pages'.
const cycleZeroUpTo = ` and (u.account collate "C", u.currency) <= ($5, $6)`

// ListCycleBalances pages through the provider pending balances of a cycle
// in (account, currency) order: the non-zero ones, and at 0 the accounts
// only charges billed at 0.00 went to (nothing was posted to them, and
// settlement, which settles whom this lists, left their GPU-hours on no
// statement). Read together as one page (a union), the 0.00 accounts' part
// read every 0.00 charge of the cycle after the cursor on every page until
// it had a page of accounts with no balance: where most providers with a
// balance also had 0.00 charges, a close paged with the square of the
// cycle's size (34 s against 0.06 s for 100 000 providers and 2 million
// 0.00 charges). Now the non-zero page is read first, and the 0.00
// accounts only up to its last key when it is full, so each 0.00 charge is
// read by one page.
func ListCycleBalances(ctx context.Context, q Querier, cycle, afterAccount, afterCurrency string, limit int) ([]domain.CycleBalance, error) {
	nonZero, err := cycleNonZero(ctx, q, cycle, afterAccount, afterCurrency, limit)
	if err != nil {
		return nil, err
	}
	query, args := fmt.Sprintf(cycleZeroSQL, ""), []any{cycle, afterAccount, afterCurrency, limit}
	if len(nonZero) == limit {
		last := nonZero[len(nonZero)-1]
		query, args = fmt.Sprintf(cycleZeroSQL, cycleZeroUpTo), append(args, last.Account, last.Currency)
	}
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("cycle balances billed at 0.00: %w", err)
	}
	zero, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (domain.CycleBalance, error) {
		b := domain.CycleBalance{Amount: decimal.Zero}
		return b, r.Scan(&b.Account, &b.Currency)
	})
	if err != nil {
		return nil, fmt.Errorf("cycle balances billed at 0.00: %w", err)
	}
	return mergeCycleBalances(nonZero, zero, limit), nil
}

// cycleNonZero is a page of cycleNonZeroSQL.
func cycleNonZero(ctx context.Context, q Querier, cycle, afterAccount, afterCurrency string, limit int) ([]domain.CycleBalance, error) {
	rows, err := q.Query(ctx, cycleNonZeroSQL, cycle, afterAccount, afterCurrency, limit)
	if err != nil {
		return nil, fmt.Errorf("cycle balances: %w", err)
	}
	var out []domain.CycleBalance
	for rows.Next() {
		var b domain.CycleBalance
		var amt string
		if err := rows.Scan(&b.Account, &b.Currency, &amt); err != nil {
			return nil, err
		}
		if b.Amount, err = decimal.NewFromString(amt); err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, rows.Err()
}

// mergeCycleBalances merges two lists in (account, currency) order, the C
// collation's (bytes), that share no key, and keeps the first limit.
func mergeCycleBalances(a, b []domain.CycleBalance, limit int) []domain.CycleBalance {
	out := make([]domain.CycleBalance, 0, min(limit, len(a)+len(b)))
	for len(out) < limit && (len(a) > 0 || len(b) > 0) {
		if len(b) == 0 || (len(a) > 0 && (a[0].Account < b[0].Account || a[0].Account == b[0].Account && a[0].Currency < b[0].Currency)) {
			out, a = append(out, a[0]), a[1:]
			continue
		}
		out, b = append(out, b[0]), b[1:]
	}
	return out
}

// The read queries, on the pool, as app.Store.

// LoadTransactions implements app.Store.
func (s *Store) LoadTransactions(ctx context.Context, ids []string) ([]*domain.Transaction, error) {
	return LoadTransactions(ctx, s.Pool, ids)
}

// TxByKey implements app.Store.
func (s *Store) TxByKey(ctx context.Context, key string) (string, []byte, error) {
	return TxByKey(ctx, s.Pool, key)
}

// RenterClosedAt implements app.Store: ledger.renters' closed_at (the zero
// time for an open renter or one the ledger has no record of).
func (s *Store) RenterClosedAt(ctx context.Context, renterID string) (time.Time, error) {
	var at *time.Time
	err := s.Pool.QueryRow(ctx, `select closed_at from ledger.renters where renter_id = $1`, renterID).Scan(&at)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && at == nil {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("renter %s: %w", renterID, err)
	}
	return *at, nil
}

// AccountExists implements app.Store.
func (s *Store) AccountExists(ctx context.Context, address string) (bool, error) {
	return AccountExists(ctx, s.Pool, address)
}

// AccountTotals implements app.Store.
func (s *Store) AccountTotals(ctx context.Context, accounts []string, asOf *time.Time) (map[string][]domain.Totals, error) {
	return AccountTotals(ctx, s.Pool, accounts, asOf)
}

// ListAccountAddresses implements app.Store.
func (s *Store) ListAccountAddresses(ctx context.Context, prefix, after string, limit int) ([]string, error) {
	return ListAccountAddresses(ctx, s.Pool, prefix, after, limit)
}

// ListTxIDs implements app.Store.
func (s *Store) ListTxIDs(ctx context.Context, after string, from domain.TxLate, limit int) (domain.TxPage, error) {
	return ListTxIDs(ctx, s.Pool, after, from, limit)
}

// TxIDsByKeys implements app.Store.
func (s *Store) TxIDsByKeys(ctx context.Context, keys []string) ([]string, error) {
	return TxIDsByKeys(ctx, s.Pool, keys)
}

// ListTxIDsByAccount implements app.Store.
func (s *Store) ListTxIDsByAccount(ctx context.Context, account string, after *domain.TxCursor, from domain.TxLate, limit int) (domain.TxPage, error) {
	return ListTxIDsByAccount(ctx, s.Pool, account, after, from, limit)
}

// ListCycleBalances implements app.Store.
func (s *Store) ListCycleBalances(ctx context.Context, cycle, afterAccount, afterCurrency string, limit int) ([]domain.CycleBalance, error) {
	return ListCycleBalances(ctx, s.Pool, cycle, afterAccount, afterCurrency, limit)
}

// statementLinesSQL sums a pending account's postings in a currency, but
// the transactions excluded, per lease, renter and GPU model (credits of a
// charge's shape naming a lease), and lists every other posting alone
// (debits negative), in the order each line first appears in the account.
// A credit is of a charge's shape when its entry moves only the provider's
// own accounts ($4: domain.PartyPrefix) and the wallet of the renter its
// metadata names: finance's transfer from p-2's pending tagged with p-2's
// lease and renter, or a goodwill credit from bank:operating so tagged,
// made a lease line of p-1's naming them, while the transaction read
// withholds both. GPU hours count where the metadata holds a plain decimal.
// The charges billed at 0.00 that would have credited the account
// (ledger.unbilled_charges, pricing's charges) add their hours to their
// lease's line, no amount and no posting. A line of one posting carries
// every account its entry moves: the entry's text is the provider's to read
// only if all are its own (domain.ProviderLine.ReadBy).
const statementLinesSQL = `with mine as (
		select p.tx_id, p.direction, p.amount, p.created_at, t.metadata, t.description,
			case when p.direction = 'credit' and not exists (select 1 from ledger.postings q where q.tx_id = p.tx_id
					and not starts_with(q.account, $4)
					and q.account <> 'renter:' || coalesce(t.metadata->>'renter_id', '') || ':wallet')
				then coalesce(t.metadata->>'lease_id', '') else '' end as lease_id
		from ledger.postings p join ledger.transactions t on t.id = p.tx_id
		where p.account = $1 and p.currency = $2 and p.tx_id <> all($3::uuid[])
		union all
		select null, 'credit', 0, u.created_at, u.metadata, '', u.metadata->>'lease_id'
		from ledger.unbilled_charges u
		where u.account = $1 and u.currency = $2 and u.metadata->>'lease_id' <> '')
	select lease_id, coalesce(metadata->>'renter_id', ''), coalesce(metadata->>'gpu_model', ''),
		sum(case when metadata->>'gpu_hours' ~ '^[0-9]+(\.[0-9]+)?$' then (metadata->>'gpu_hours')::numeric end),
		sum(amount), '', count(tx_id), '', min(created_at) as first_at, coalesce(min(tx_id::text), '') as first_tx, null::text[]
	from mine where direction = 'credit' and lease_id <> ''
	group by 1, 2, 3
	union all
	select '', coalesce(metadata->>'renter_id', ''), '', null,
		case when direction = 'credit' then amount else -amount end, description, 1, tx_id::text, created_at, tx_id::text,
		array(select q.account from ledger.postings q where q.tx_id = mine.tx_id order by q.idx)
	from mine where direction = 'debit' or lease_id = ''
	order by first_at, first_tx, 1, 2, 3`

// StatementLines implements app.Store.
func (s *Store) StatementLines(ctx context.Context, account, currency string, exclude []string) ([]domain.ProviderLine, error) {
	addr, err := domain.ParseAddress(account)
	if err != nil {
		return nil, fmt.Errorf("statement lines of %s: %w", account, err)
	}
	own := domain.PartyPrefix(domain.ClassProvider, addr.Party)
	rows, err := s.Pool.Query(ctx, statementLinesSQL, account, currency, exclude, own)
	if err != nil {
		return nil, fmt.Errorf("statement lines of %s: %w", account, err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (domain.ProviderLine, error) {
		var l domain.ProviderLine
		var firstAt time.Time
		var firstTx string
		return l, r.Scan(&l.LeaseID, &l.RenterID, &l.GPUModel, &l.GPUHours, &l.Amount, &l.Description, &l.Postings, &l.TransactionID,
			&firstAt, &firstTx, &l.Accounts)
	})
}
