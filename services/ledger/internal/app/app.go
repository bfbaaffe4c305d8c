// Package app holds the ledger's use cases, one file per use case. Every
// write goes through Store.WithTx and Tx.Post (one database transaction:
// journal rows, postings, balances, idempotency and the outbox together),
// or, for a group of new API writes, Store.PostNew (the same in one round
// trip).
// The repository interfaces it needs are in repository.go.
package app

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/audit"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/group"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// App is the ledger's use cases.
type App struct {
	Store    Store
	Clock    clock.Clock
	Calendar cycles.Calendar
	Log      *slog.Logger
	// GroupTimeout bounds an API write's group commit from when the write
	// was queued, the wait behind a group ahead and the per-write retries
	// included (GPUBILL_LEDGER_GROUP_COMMIT_TIMEOUT); 0 is
	// DefaultGroupTimeout. Set before the first write.
	GroupTimeout time.Duration

	group   *group.Queue[*groupReq] // API writes waiting for their group commit
	renters renterStates            // renters' states as finance entries' checks last read them
}

// New wires the use cases.
func New(store Store, clk clock.Clock, cal cycles.Calendar, log *slog.Logger) *App {
	if clk == nil {
		clk = clock.System{}
	}
	if log == nil {
		log = slog.Default()
	}
	a := &App{Store: store, Clock: clk, Calendar: cal, Log: log}
	a.group = a.newGroups()
	return a
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
// conflict. extra runs inside the same database transaction after the
// postings (reversal links).
func (a *App) postOne(ctx context.Context, t *domain.Transaction, au Audited, extra func(Tx) error) (*domain.Transaction, error) {
	resultID := t.ID
	var changes []domain.BalanceChange
	var claims []*audit.Claim
	err := a.Store.WithTx(ctx, func(tx Tx) error {
		claims = nil // a retried attempt starts afresh
		txs := []*domain.Transaction{t}
		if err := lockTouchedCycles(ctx, tx, txs); err != nil {
			return err
		}
		fresh, ch, err := tx.Post(ctx, txs)
		if err != nil {
			return err
		}
		if len(fresh) == 0 {
			resultID, err = replayed(ctx, tx, t)
			return err
		}
		if err := a.checkClosedCycles(ctx, tx, fresh, ch, true); err != nil {
			return err
		}
		if err := checkOverdraft(ch); err != nil {
			return err
		}
		if err := checkWriteOffs(fresh, ch); err != nil {
			return err
		}
		if err := checkRefunds(fresh, ch); err != nil {
			return err
		}
		if err := checkRailRefunds(ctx, tx, fresh); err != nil {
			return err
		}
		if extra != nil {
			if err := extra(tx); err != nil {
				return err
			}
		}
		if claims, err = addAudited(ctx, tx, au); err != nil {
			return err
		}
		changes = ch
		return tx.PublishDepletions(ctx, domain.Depletions(fresh, ch, a.now()))
	})
	if err != nil {
		return nil, err
	}
	stored(claims)
	a.Store.Remember(changes)
	if resultID == t.ID {
		return posted(t), nil
	}
	return a.getTransaction(ctx, resultID)
}

// addAudited stores in tx, with the write, the audit records of audited
// that writes posted fresh took (a replay's is the interceptor's: it names
// the transaction first posted): what PostNew does for a group it takes
// whole. A write committed here after its caller left (a group's per-write
// retries) was recorded only as its caller's Canceled. The claims are to
// be marked stored once tx commits (stored).
func addAudited(ctx context.Context, tx Tx, audited ...Audited) ([]*audit.Claim, error) {
	var took []Audited
	for _, au := range audited {
		if au.Claim != nil {
			took = append(took, au)
		}
	}
	if len(took) == 0 {
		return nil, nil
	}
	return tx.AddAuditRecords(ctx, took)
}

// stored tells the audit interceptor that the records of claims committed.
func stored(claims []*audit.Claim) {
	for _, c := range claims {
		c.Stored()
	}
}

// posted is the answer for a transaction this call has just committed: what
// a read would return, without the read (two queries per call). Postgres
// stores its times at microsecond precision (App.now, the input's
// EffectiveAt) and its amounts exactly; nothing has reversed it yet and the
// chain worker has most likely not chained it (Hash "" until a read finds
// it chained).
func posted(t *domain.Transaction) *domain.Transaction {
	c := *t
	c.ReversedBy, c.Hash = "", ""
	return &c
}

// replayed is the id of the transaction stored under t's idempotency key,
// or a conflict if it was stored for a different request.
func replayed(ctx context.Context, tx Tx, t *domain.Transaction) (string, error) {
	id, h, err := tx.TxByKey(ctx, t.IdempotencyKey)
	if err != nil {
		return "", fmt.Errorf("idempotency key %q: %w", t.IdempotencyKey, err)
	}
	if !bytes.Equal(h, t.RequestHash[:]) {
		return "", fmt.Errorf("idempotency key %q was used for a different request (transaction %s): %w",
			t.IdempotencyKey, id, apperr.ErrConflict)
	}
	return id, nil
}

// checkOverdraft refuses to take an account below zero unless the account
// may go negative (renter wallets) or only reversals moved it.
func checkOverdraft(changes []domain.BalanceChange) error {
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
	txs, err := a.Store.LoadTransactions(ctx, []string{id})
	if err != nil {
		return nil, err
	}
	if len(txs) == 0 {
		return nil, TransactionNotFound(id)
	}
	return txs[0], nil
}

// TransactionNotFound is the error of a transaction id the journal does not
// hold, and what a provider or renter is answered for another party's
// transaction: the two must not differ.
func TransactionNotFound(id string) error {
	return fmt.Errorf("transaction %s: %w", id, apperr.ErrNotFound)
}
