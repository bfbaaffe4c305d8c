// Package app holds the ledger's use cases, one file per use case. Every
// write goes through post (one Postgres transaction: journal rows, postings,
// balances, idempotency and the outbox together).
package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/pg"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	"github.com/gpubill/gpubill/services/ledger/internal/adapters/postgres"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// App is the ledger's use cases.
type App struct {
	Pool     *pgxpool.Pool
	Store    *postgres.Store
	Clock    clock.Clock
	Calendar cycles.Calendar
	Log      *slog.Logger

	group grouper
}

// New wires the use cases.
func New(pool *pgxpool.Pool, clk clock.Clock, cal cycles.Calendar, log *slog.Logger) *App {
	if clk == nil {
		clk = clock.System{}
	}
	if log == nil {
		log = slog.Default()
	}
	return &App{Pool: pool, Store: postgres.NewStore(pool), Clock: clk, Calendar: cal, Log: log}
}

// now is the creation time of journal rows, at Postgres' microsecond precision
// so what the caller sees is what the chain hashes.
func (a *App) now() time.Time { return a.Clock.Now().UTC().Truncate(time.Microsecond) }

func invalid(vs []domain.Violation) error {
	if len(vs) == 0 {
		return nil
	}
	e := &apperr.InvalidError{}
	for _, v := range vs {
		e.Violations = append(e.Violations, apperr.FieldViolation{Field: v.Field, Reason: v.Reason})
	}
	return e
}

// postOne posts a single transaction idempotently: a replay (same key, same
// request hash) returns the original, the same key with another request is a
// conflict. extra runs inside the same Postgres transaction after the
// postings (reversal links).
func (a *App) postOne(ctx context.Context, t *domain.Transaction, extra func(pgx.Tx) error) (*domain.Transaction, error) {
	resultID := t.ID
	var changes []postgres.BalanceChange
	err := pg.InTx(ctx, a.Pool, func(tx pgx.Tx) error {
		if err := lockTouchedCycles(ctx, tx, []*domain.Transaction{t}); err != nil {
			return err
		}
		fresh, ch, err := a.Store.Post(ctx, tx, []*domain.Transaction{t}, func(fresh []*domain.Transaction) error {
			return outbox.Add(ctx, tx, postgres.Schema, postedEvents(fresh)...)
		})
		if err != nil {
			return err
		}
		if len(fresh) == 0 {
			id, h, err := postgres.TxByKey(ctx, tx, t.IdempotencyKey)
			if err != nil {
				return fmt.Errorf("idempotency key %q: %w", t.IdempotencyKey, err)
			}
			if !bytes.Equal(h, t.RequestHash[:]) {
				return fmt.Errorf("idempotency key %q was used for a different request (transaction %s): %w",
					t.IdempotencyKey, id, apperr.ErrConflict)
			}
			resultID = id
			return nil
		}
		if err := a.checkClosedCycles(ctx, tx, fresh, ch, true); err != nil {
			return err
		}
		if err := checkOverdraft(ch); err != nil {
			return err
		}
		if extra != nil {
			if err := extra(tx); err != nil {
				return err
			}
		}
		changes = ch
		return outbox.Add(ctx, tx, postgres.Schema, depletionEvents(fresh, ch, a.now())...)
	})
	if err != nil {
		return nil, err
	}
	a.Store.Remember(changes)
	return a.getTransaction(ctx, resultID)
}

// checkOverdraft refuses to take an account below zero unless the account
// may go negative (renter wallets) or only reversals moved it.
func checkOverdraft(changes []postgres.BalanceChange) error {
	var vs []domain.Violation
	for _, c := range changes {
		if c.Account.MayGoNegative() || c.Reversal || !c.After.IsNegative() || !c.Delta.IsNegative() {
			continue
		}
		vs = append(vs, domain.Violation{Field: "postings", Reason: fmt.Sprintf(
			"%s would go negative in %s (balance %s after this transaction): %s accounts may not be overdrawn except by a reversal",
			c.Account.Address, c.Currency, c.After.String(), c.Account.Class)})
	}
	return invalid(vs)
}

func (a *App) getTransaction(ctx context.Context, id string) (*domain.Transaction, error) {
	txs, err := postgres.LoadTransactions(ctx, a.Pool, []string{id})
	if err != nil {
		return nil, err
	}
	if len(txs) == 0 {
		return nil, fmt.Errorf("transaction %s: %w", id, apperr.ErrNotFound)
	}
	return txs[0], nil
}

// postedPayloadMax bounds one ledger.posted message (JetStream refuses
// payloads over the server's max_payload, 1 MiB by default): a class's
// transactions of one write are split into several batches when needed.
const postedPayloadMax = 256 << 10

// postedEvents are ledger.posted.{class}: LedgerPostedBatch messages per
// account class the write touches, carrying every transaction that moves an
// account of that class (with all its postings), so a subscriber to one
// class sees every movement of it. One message per class per write (split
// only past postedPayloadMax), not per transaction, keeps the outbox and
// JetStream cost of a fetched batch of thousands of charges at a handful of
// messages. A batch id is its first transaction's id (fresh, unique) and the
// class.
func postedEvents(txs []*domain.Transaction) []outbox.Message {
	if len(txs) == 0 {
		return nil
	}
	type open struct {
		b    *eventsv1.LedgerPostedBatch
		size int
	}
	var out []outbox.Message
	var classes []domain.Class
	batches := map[domain.Class]*open{}
	flush := func(c domain.Class) {
		o := batches[c]
		if o == nil || len(o.b.Transactions) == 0 {
			return
		}
		payload, err := proto.Marshal(o.b)
		if err == nil { // a message of strings and timestamps always marshals
			out = append(out, outbox.Message{ID: o.b.BatchId, Subject: "ledger.posted." + string(c), Payload: payload})
		}
		delete(batches, c)
	}
	for _, t := range txs {
		ev := &eventsv1.LedgerPosted{
			TransactionId: t.ID, IdempotencyKey: t.IdempotencyKey,
			EffectiveAt: timestamppb.New(t.EffectiveAt), CreatedAt: timestamppb.New(t.CreatedAt),
			Postings: make([]*eventsv1.Posting, 0, len(t.Postings)),
		}
		for _, p := range t.Postings {
			ev.Postings = append(ev.Postings, &eventsv1.Posting{Account: p.Account.Address, Direction: string(p.Direction),
				Amount: p.Amount.String(), Currency: p.Currency})
		}
		size := proto.Size(ev) + 8
		for i, p := range t.Postings {
			c := p.Account.Class
			dup := false
			for _, q := range t.Postings[:i] {
				dup = dup || q.Account.Class == c
			}
			if dup {
				continue // one entry per transaction in each class's batch
			}
			if o := batches[c]; o != nil && o.size+size > postedPayloadMax {
				flush(c)
			}
			o := batches[c]
			if o == nil {
				o = &open{b: &eventsv1.LedgerPostedBatch{BatchId: "ledger-posted-" + t.ID + "-" + string(c)}}
				batches[c] = o
				seen := false
				for _, k := range classes {
					seen = seen || k == c
				}
				if !seen {
					classes = append(classes, c)
				}
			}
			o.b.Transactions = append(o.b.Transactions, ev)
			o.size += size
		}
	}
	for _, c := range classes {
		flush(c)
	}
	return out
}

// depletionEvents are billing.wallet.depleted.{renter} for every renter
// wallet a debit took from above zero (or from nothing) to zero or below.
func depletionEvents(txs []*domain.Transaction, changes []postgres.BalanceChange, at time.Time) []outbox.Message {
	var out []outbox.Message
	var last map[string]string // wallet|currency → the batch's last transaction on it
	for _, c := range changes {
		if c.Account.Class != domain.ClassRenter || !c.Delta.IsNegative() || c.After.IsPositive() {
			continue
		}
		if !c.Before().IsPositive() && !c.Created {
			continue // already depleted: announced when it crossed
		}
		if last == nil {
			last = make(map[string]string, len(txs))
			for _, t := range txs {
				for _, p := range t.Postings {
					if p.Account.Class == domain.ClassRenter {
						last[p.Account.Address+"|"+p.Currency] = t.ID
					}
				}
			}
		}
		txID := last[c.Account.Address+"|"+c.Currency]
		payload, err := proto.Marshal(&eventsv1.WalletDepleted{RenterId: c.Account.Party, Currency: c.Currency,
			Balance: c.After.String(), TransactionId: txID, At: timestamppb.New(at)})
		if err != nil {
			continue
		}
		out = append(out, outbox.Message{ID: "wallet-depleted-" + txID + "-" + c.Currency,
			Subject: "billing.wallet.depleted." + c.Account.Party, Payload: payload})
	}
	return out
}

var errNotFound = postgres.ErrNotFound

func notFound(err error, what string) error {
	if errors.Is(err, errNotFound) {
		return fmt.Errorf("%s: %w", what, apperr.ErrNotFound)
	}
	return err
}
