// Package ledgerhistory writes a journal's history straight into a fresh
// ledger database with COPY, for benchmarks that need millions of posted
// transactions before they start (the pipeline_history figure). What it
// writes is what the ledger would have written posting them one by one:
// the transactions and their postings, the hash chain over them in the
// chain's (xid, id) order with the ledger's own ChainHash, the accounts on
// first use and the maintained balances. `gpubill ledger verify` passes over
// it, and the ledger starts on it and posts after it normally.
package ledgerhistory

import (
	"context"
	"fmt"
	"math/big"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/services/ledger/internal/adapters/postgres"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// copyTxMax is how many transactions one COPY round (one Postgres
// transaction) writes.
const copyTxMax = 20_000

type balKey struct{ account, currency string }

type bal struct {
	debits, credits int64 // minor units (cents)
	cycle           string
}

// Writer appends transactions to a journal through one connection. The
// chain it extends must be its own: nothing else may post while it writes.
// Amounts are in cents of a two-decimal currency.
type Writer struct {
	conn     *pgx.Conn
	buf      []*domain.Transaction
	pos      int64
	prev     []byte
	balances map[balKey]*bal
	accounts map[string]domain.Account
	seq      uint64
	n        int64
}

// NewWriter starts a writer on conn, which must hold a migrated ledger
// schema whose journal is empty (the balances are written by Close, not
// added to).
func NewWriter(ctx context.Context, conn *pgx.Conn) (*Writer, error) {
	var n int64
	if err := conn.QueryRow(ctx, `select (select count(*) from ledger.journal_chain) + (select count(*) from ledger.transactions)`).Scan(&n); err != nil {
		return nil, fmt.Errorf("journal size: %w", err)
	}
	if n != 0 {
		return nil, fmt.Errorf("ledgerhistory writes into an empty journal; this one holds %d rows", n)
	}
	return &Writer{conn: conn, prev: domain.GenesisHash, balances: map[balKey]*bal{}, accounts: map[string]domain.Account{}}, nil
}

// Posted is how many transactions the writer has written so far.
func (w *Writer) Posted() int64 { return w.n }

// id is a UUIDv7 of at's millisecond whose random bits are the writer's
// sequence: unique, and in time order as the ledger's own ids are.
func (w *Writer) id(at time.Time) string {
	w.seq++
	var u uuid.UUID
	ms := uint64(at.UnixMilli())
	for i := 0; i < 6; i++ {
		u[i] = byte(ms >> (40 - 8*i))
	}
	s := w.seq
	for i := 15; i >= 8; i-- {
		u[i] = byte(s)
		s >>= 8
	}
	u[6] = 0x70 | byte(w.seq>>60)&0x0f
	u[8] = 0x80 | u[8]&0x3f // the variant
	return u.String()
}

func cents(c int64) decimal.Decimal { return decimal.New(c, -2) }

// Charge appends a usage charge as the ledger posts one from charges.rated:
// keyed by the charge id, Dr the renter's wallet, Cr the provider's pending
// account of the cycle.
func (w *Writer) Charge(ctx context.Context, chargeID, leaseID, renter, provider, cycle, currency, gpuModel, gpuHours string, amountCents int64, at time.Time) error {
	wallet, err := domain.ParseAddress(domain.RenterWallet(renter))
	if err != nil {
		return err
	}
	pending, err := domain.ParseAddress(domain.ProviderPendingAddr(provider, cycle))
	if err != nil {
		return err
	}
	amt := cents(amountCents)
	hash, err := domain.RequestHash("charge", map[string]any{"amount": amt.String(), "currency": currency, "cycle_id": cycle,
		"provider_id": provider, "renter_id": renter})
	if err != nil {
		return err
	}
	md := map[string]string{"kind": "usage_charge", "lease_id": leaseID, "renter_id": renter, "charge_id": chargeID,
		"gpu_model": gpuModel, "gpu_hours": gpuHours}
	return w.add(ctx, &domain.Transaction{IdempotencyKey: chargeID, Kind: domain.TxCharge, RequestHash: hash, Metadata: md,
		Postings: []domain.Posting{
			{Account: wallet, Direction: domain.Debit, Amount: amt, Currency: currency},
			{Account: pending, Direction: domain.Credit, Amount: amt, Currency: currency},
		}}, at)
}

// Deposit appends a renter top-up as the ledger's Deposit posts it: Dr
// bank:client, Cr the renter's wallet, keyed by the bank reference.
func (w *Writer) Deposit(ctx context.Context, ref, renter, currency string, amountCents int64, at time.Time) error {
	bank, err := domain.ParseAddress(domain.BankClient)
	if err != nil {
		return err
	}
	wallet, err := domain.ParseAddress(domain.RenterWallet(renter))
	if err != nil {
		return err
	}
	amt := cents(amountCents)
	hash, err := domain.RequestHash("deposit", map[string]any{"renter_id": renter, "amount": amt.String(), "currency": currency})
	if err != nil {
		return err
	}
	return w.add(ctx, &domain.Transaction{IdempotencyKey: "deposit:" + ref, Kind: domain.TxDeposit, Description: "renter top-up " + ref,
		RequestHash: hash, Metadata: map[string]string{"external_ref": ref, "renter_id": renter},
		Postings: []domain.Posting{
			{Account: bank, Direction: domain.Debit, Amount: amt, Currency: currency},
			{Account: wallet, Direction: domain.Credit, Amount: amt, Currency: currency},
		}}, at)
}

// Release appends the move of a provider's closed-cycle earnings from
// pending to available (a manual transaction keyed by provider and cycle).
func (w *Writer) Release(ctx context.Context, provider, cycle, currency string, amountCents int64, at time.Time) error {
	pending, err := domain.ParseAddress(domain.ProviderPendingAddr(provider, cycle))
	if err != nil {
		return err
	}
	avail, err := domain.ParseAddress("provider:" + provider + ":" + domain.ProviderAvailable)
	if err != nil {
		return err
	}
	amt := cents(amountCents)
	key := "release:" + provider + ":" + cycle
	hash, err := domain.RequestHash("manual", map[string]any{"key": key, "amount": amt.String(), "currency": currency})
	if err != nil {
		return err
	}
	return w.add(ctx, &domain.Transaction{IdempotencyKey: key, Kind: domain.TxManual, Description: "cycle " + cycle + " earnings released",
		RequestHash: hash, Metadata: map[string]string{"provider_id": provider, "cycle_id": cycle},
		Postings: []domain.Posting{
			{Account: pending, Direction: domain.Debit, Amount: amt, Currency: currency},
			{Account: avail, Direction: domain.Credit, Amount: amt, Currency: currency},
		}}, at)
}

func (w *Writer) add(ctx context.Context, t *domain.Transaction, at time.Time) error {
	at = at.UTC().Truncate(time.Microsecond) // what Postgres keeps
	t.ID, t.EffectiveAt, t.CreatedAt = w.id(at), at, at
	for _, p := range t.Postings {
		if !p.Amount.IsPositive() {
			return fmt.Errorf("transaction %s: posting amount %s is not positive", t.IdempotencyKey, p.Amount)
		}
		k := balKey{p.Account.Address, p.Currency}
		b := w.balances[k]
		if b == nil {
			b = &bal{cycle: p.Account.Cycle}
			w.balances[k] = b
			w.accounts[p.Account.Address] = p.Account
		}
		c := p.Amount.Shift(2).IntPart()
		if p.Direction == domain.Debit {
			b.debits += c
		} else {
			b.credits += c
		}
	}
	w.buf = append(w.buf, t)
	if len(w.buf) >= copyTxMax {
		return w.Flush(ctx)
	}
	return nil
}

// Flush writes the buffered transactions in one Postgres transaction: the
// journal rows and postings by COPY, and their links of the hash chain.
// The chain orders a round's transactions by id (they share the round's
// xid); ids grow with time, so that is the order they were appended in.
func (w *Writer) Flush(ctx context.Context) error {
	if len(w.buf) == 0 {
		return nil
	}
	sort.Slice(w.buf, func(i, j int) bool { return w.buf[i].ID < w.buf[j].ID })
	err := pgx.BeginFunc(ctx, w.conn, func(tx pgx.Tx) error {
		var xid string
		if err := tx.QueryRow(ctx, `select pg_current_xact_id()::text`).Scan(&xid); err != nil {
			return err
		}
		txRows := make([][]any, len(w.buf))
		var postRows [][]any
		ids, xids := make([]string, len(w.buf)), make([]string, len(w.buf))
		positions, prevs, hashes := make([]int64, len(w.buf)), make([][]byte, len(w.buf)), make([][]byte, len(w.buf))
		for i, t := range w.buf {
			u := pgtype.UUID{Bytes: uuid.MustParse(t.ID), Valid: true}
			txRows[i] = []any{u, t.IdempotencyKey, t.RequestHash[:], string(t.Kind), t.Description, t.EffectiveAt, t.CreatedAt, t.Metadata}
			for j, p := range t.Postings {
				postRows = append(postRows, []any{u, int32(j), p.Account.Address, p.Currency, string(p.Direction),
					pgtype.Numeric{Int: big.NewInt(p.Amount.Shift(2).IntPart()), Exp: -2, Valid: true}, t.CreatedAt})
			}
			w.pos++
			h := domain.ChainHash(w.prev, *t)
			ids[i], xids[i], positions[i], prevs[i], hashes[i] = t.ID, xid, w.pos, w.prev, h
			w.prev = h
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"ledger", "transactions"},
			[]string{"id", "idempotency_key", "request_hash", "kind", "description", "effective_at", "created_at", "metadata"},
			pgx.CopyFromRows(txRows)); err != nil {
			return fmt.Errorf("copy transactions: %w", err)
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"ledger", "postings"},
			[]string{"tx_id", "idx", "account", "currency", "direction", "amount", "created_at"}, pgx.CopyFromRows(postRows)); err != nil {
			return fmt.Errorf("copy postings: %w", err)
		}
		if _, err := tx.Exec(ctx, `insert into ledger.journal_chain (position, tx_id, xid, prev_hash, hash, chained_at)
			select p, id::uuid, x::xid8, ph, h, now() from unnest($1::bigint[], $2::text[], $3::text[], $4::bytea[], $5::bytea[]) as u(p, id, x, ph, h)`,
			positions, ids, xids, prevs, hashes); err != nil {
			return fmt.Errorf("append chain: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("write %d transactions: %w", len(w.buf), err)
	}
	w.n += int64(len(w.buf))
	w.buf = w.buf[:0]
	return nil
}

// Close flushes what is buffered, then writes the accounts the journal
// used, the balances it makes and the wallet_burn minutes of its charges of
// the last two hours (what the ledger maintains as it posts).
func (w *Writer) Close(ctx context.Context) error {
	if err := w.Flush(ctx); err != nil {
		return err
	}
	accRows := make([][]any, 0, len(w.accounts))
	for _, a := range w.accounts {
		accRows = append(accRows, []any{a.Address, string(a.Class), string(a.Kind), string(a.Pool)})
	}
	if _, err := w.conn.CopyFrom(ctx, pgx.Identifier{"ledger", "accounts"}, []string{"address", "class", "kind", "fund_pool"},
		pgx.CopyFromRows(accRows)); err != nil {
		return fmt.Errorf("copy accounts: %w", err)
	}
	balRows := make([][]any, 0, len(w.balances))
	for k, b := range w.balances {
		var cyc *string
		if b.cycle != "" {
			cyc = &b.cycle
		}
		balRows = append(balRows, []any{k.account, k.currency, pgtype.Numeric{Int: big.NewInt(b.debits), Exp: -2, Valid: true},
			pgtype.Numeric{Int: big.NewInt(b.credits), Exp: -2, Valid: true}, cyc})
	}
	if _, err := w.conn.CopyFrom(ctx, pgx.Identifier{"ledger", "balances"}, []string{"account", "currency", "debits", "credits", "cycle_id"},
		pgx.CopyFromRows(balRows)); err != nil {
		return fmt.Errorf("copy balances: %w", err)
	}
	if _, err := w.conn.Exec(ctx, postgres.BurnFromJournalSQL, time.Now()); err != nil {
		return fmt.Errorf("wallet burn: %w", err)
	}
	return nil
}
