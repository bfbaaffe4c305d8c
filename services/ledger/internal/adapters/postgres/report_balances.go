package postgres

import (
	"context"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/shopspring/decimal"
	"golang.org/x/sync/errgroup"

	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// Balances returns the non-zero debits - credits per account in currency:
// now (asOf nil) from the maintained balances; as of an instant from a
// base (a balance checkpoint or the maintained balances) and the postings
// created between the base and the instant (the BRIN index on
// created_at), never a scan of the journal.
func (r *Reports) Balances(ctx context.Context, currency string, asOf *time.Time) ([]domain.AccountNet, error) {
	if asOf == nil {
		rows, err := r.Pool.Query(ctx, `select account, debits - credits from ledger.balances
			where currency = $1 and debits <> credits`, currency)
		if err != nil {
			return nil, fmt.Errorf("balances of %s: %w", currency, err)
		}
		return scanNets(rows)
	}
	nets, err := r.balancesAsOf(ctx, currency, asOf.UTC())
	if err != nil {
		return nil, fmt.Errorf("balances of %s as of %s: %w", currency, asOf, err)
	}
	return nets, nil
}

// asOfBase is what balances as of an instant start from: the rows of the
// checkpoint at `at`, or the maintained balances (now). The postings
// created between the base and the instant are added when the base is
// before it and taken away when after.
type asOfBase struct {
	at          time.Time
	now, before bool
}

// freshCheckpointsBefore selects since: the checkpoints at or after it are
// stale (a posting created at or before them committed after they were
// made: migration 0040) until the checkpoint step rebuilds them, and no
// figure starts from them; infinity when none is.
const freshCheckpointsBefore = `select coalesce(min(since), 'infinity'::timestamptz) as since from ledger.checkpoint_late`

// nearestBase picks, of the fresh checkpoints either side of asOf and the
// maintained balances (as of r.Now), the one nearest asOf in time, so
// that the fewest postings lie between: a report as of a recent instant
// takes the postings since away from the balances now rather than adding
// a day's postings to the last checkpoint. Every base gives the same
// figures (TestSegregatedFundsAsOfFromCheckpoints).
func (r *Reports) nearestBase(ctx context.Context, q pgx.Tx, asOf time.Time) (asOfBase, error) {
	var prev, next *time.Time
	if err := q.QueryRow(ctx, `select (select max(at) from ledger.balance_checkpoints where at <= $1 and at < s.since),
			(select min(at) from ledger.balance_checkpoints where at > $1 and at < s.since)
		from (`+freshCheckpointsBefore+`) s`, asOf).Scan(&prev, &next); err != nil {
		return asOfBase{}, fmt.Errorf("checkpoints around: %w", err)
	}
	now := time.Now()
	if r.Now != nil {
		now = r.Now()
	}
	best, dist := asOfBase{now: true}, now.Sub(asOf)
	dist = max(dist, -dist)
	if prev != nil && asOf.Sub(*prev) <= dist {
		best, dist = asOfBase{at: prev.UTC(), before: true}, asOf.Sub(*prev)
	}
	if next != nil && next.Sub(asOf) < dist {
		best = asOfBase{at: next.UTC()}
	}
	return best, nil
}

var snapshotID = regexp.MustCompile(`^[0-9A-Fa-f-]+$`)

// balancesAsOf reads the base's rows and the postings between it and asOf
// in one snapshot, on two connections at once when the pool has them, and
// adds them up per account. In memory (the default work_mem spills the
// hash aggregate to disk) and without JIT (compiling costs more than the
// query saves).
func (r *Reports) balancesAsOf(ctx context.Context, currency string, asOf time.Time) ([]domain.AccountNet, error) {
	opts := pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}
	setup := `select set_config('work_mem', '64MB', true), set_config('jit', 'off', true)`
	txBase, err := r.Pool.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer txBase.Rollback(context.WithoutCancel(ctx)) // read only
	var snap string
	if err := txBase.QueryRow(ctx, `select pg_export_snapshot()`).Scan(&snap); err != nil {
		return nil, fmt.Errorf("export snapshot: %w", err)
	}
	if _, err := txBase.Exec(ctx, setup); err != nil {
		return nil, err
	}
	base, err := r.nearestBase(ctx, txBase, asOf)
	if err != nil {
		return nil, err
	}
	txDelta := txBase // one connection: one after the other
	if r.Pool.Config().MaxConns >= 2 && snapshotID.MatchString(snap) {
		if txDelta, err = r.Pool.BeginTx(ctx, opts); err != nil {
			return nil, err
		}
		defer txDelta.Rollback(context.WithoutCancel(ctx)) // read only
		if _, err := txDelta.Exec(ctx, `set transaction snapshot '`+snap+`'`); err != nil {
			return nil, fmt.Errorf("import snapshot: %w", err)
		}
		if _, err := txDelta.Exec(ctx, setup); err != nil {
			return nil, err
		}
	}
	var nets []domain.AccountNet
	var delta map[string]decimal.Decimal
	g, gctx := errgroup.WithContext(ctx)
	if txDelta == txBase {
		g.SetLimit(1)
	}
	g.Go(func() (err error) { nets, err = readBase(gctx, txBase, currency, base); return err })
	g.Go(func() (err error) { delta, err = readDelta(gctx, txDelta, currency, base, asOf); return err })
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return mergeNets(nets, delta, !base.before), nil
}

// readBase reads the base's non-zero balances.
func readBase(ctx context.Context, tx pgx.Tx, currency string, base asOfBase) ([]domain.AccountNet, error) {
	var rows pgx.Rows
	var err error
	switch {
	case base.now:
		rows, err = tx.Query(ctx, `select account, debits - credits from ledger.balances
			where currency = $1 and debits <> credits`, currency)
	default:
		rows, err = tx.Query(ctx, `select account, net_debit from ledger.checkpoint_balances
			where at = $2 and currency = $1`, currency, base.at)
	}
	if err != nil {
		return nil, fmt.Errorf("base balances: %w", err)
	}
	return scanNets(rows)
}

// readDelta sums per account the postings created between the base and
// asOf: in (base, asOf] for a base before it, in (asOf, base] for one
// after it (every later one for the balances now). Both bounds are always
// given (infinity for none), never "$2 is null or …": a generic plan of
// the prepared statement then still bounds the BRIN scan.
func readDelta(ctx context.Context, tx pgx.Tx, currency string, base asOfBase, asOf time.Time) (map[string]decimal.Decimal, error) {
	lo := pgtype.Timestamptz{Time: asOf, Valid: true}
	hi := pgtype.Timestamptz{Time: base.at, Valid: true}
	switch {
	case base.now:
		hi = pgtype.Timestamptz{InfinityModifier: pgtype.Infinity, Valid: true}
	case base.before:
		lo, hi = hi, lo
	}
	rows, err := tx.Query(ctx, `select account, sum(case when direction = 'debit' then amount else -amount end) from ledger.postings
		where currency = $1 and created_at > $2 and created_at <= $3 group by account`, currency, lo, hi)
	if err != nil {
		return nil, fmt.Errorf("postings between: %w", err)
	}
	nets, err := scanNets(rows)
	if err != nil {
		return nil, err
	}
	out := make(map[string]decimal.Decimal, len(nets))
	for _, n := range nets {
		out[n.Account] = n.NetDebit
	}
	return out, nil
}

// mergeNets adds delta to the base's balances (takes it away when
// subtract), leaving out the sums that come to zero.
func mergeNets(base []domain.AccountNet, delta map[string]decimal.Decimal, subtract bool) []domain.AccountNet {
	out := base[:0]
	for _, n := range base {
		if d, ok := delta[n.Account]; ok {
			if subtract {
				n.NetDebit = n.NetDebit.Sub(d)
			} else {
				n.NetDebit = n.NetDebit.Add(d)
			}
			delete(delta, n.Account)
		}
		if !n.NetDebit.IsZero() {
			out = append(out, n)
		}
	}
	for acc, d := range delta {
		if subtract {
			d = d.Neg()
		}
		if !d.IsZero() {
			out = append(out, domain.AccountNet{Account: acc, NetDebit: d})
		}
	}
	return out
}

// scanNets reads (account, numeric) rows, numerics in binary.
func scanNets(rows pgx.Rows) ([]domain.AccountNet, error) {
	defer rows.Close()
	var out []domain.AccountNet
	var n pgtype.Numeric
	for rows.Next() {
		var a domain.AccountNet
		if err := rows.Scan(&a.Account, &n); err != nil {
			return nil, err
		}
		var err error
		if a.NetDebit, err = decimalOf(n); err != nil {
			return nil, fmt.Errorf("balance of %s: %w", a.Account, err)
		}
		out = append(out, a)
	}
	return out, rows.Err()
}
