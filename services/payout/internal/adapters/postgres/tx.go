package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/services/payout/internal/app"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

var (
	_ app.Store = (*Store)(nil)
	_ app.Tx    = txStore{}
)

// Update implements app.Store: fn runs in one Postgres transaction.
func (s *Store) Update(ctx context.Context, fn func(app.Tx) error) error {
	return s.Tx(ctx, func(tx pgx.Tx) error { return fn(s.In(tx)) })
}

// In is the store inside tx.
func (s *Store) In(tx pgx.Tx) app.Tx { return txStore{s: s, tx: tx} }

// Claim records the message ids in payout's inbox and returns the fresh ones.
func (t txStore) Claim(ctx context.Context, consumer string, ids []string) (map[string]bool, error) {
	return outbox.Claim(ctx, t.tx, Schema, consumer, ids)
}

// txStore implements app.Tx on one pgx transaction.
type txStore struct {
	s  *Store
	tx pgx.Tx
}

func (t txStore) Lock(ctx context.Context, id string) (domain.Payout, error) {
	return t.s.Lock(ctx, t.tx, id)
}

// Gate gates with min and the minimums set through the API over it.
func (t txStore) Gate(ctx context.Context, p domain.Payout, min domain.Minimums) (string, string, string, error) {
	min, err := minimums(ctx, t.tx, min)
	if err != nil {
		return "", "", "", err
	}
	return t.s.Gate(ctx, t.tx, p, min)
}

func (t txStore) Move(ctx context.Context, p *domain.Payout, to, note string, at time.Time) error {
	return t.s.Move(ctx, t.tx, p, to, note, at)
}

func (t txStore) SetReason(ctx context.Context, p *domain.Payout, reason string, at time.Time) error {
	return t.s.SetReason(ctx, t.tx, p, reason, at)
}

func (t txStore) SetFailure(ctx context.Context, p *domain.Payout, note string, at time.Time) error {
	return t.s.SetFailure(ctx, t.tx, p, note, at)
}

func (t txStore) SetArrival(ctx context.Context, p *domain.Payout, note string, at time.Time) error {
	return t.s.SetArrival(ctx, t.tx, p, note, at)
}

func (t txStore) LockBankQueue(ctx context.Context) error {
	return t.s.LockBankQueue(ctx, t.tx)
}

func (t txStore) HoldQueued(ctx context.Context, p *domain.Payout, at time.Time) error {
	return t.s.HoldQueued(ctx, t.tx, p, at)
}

func (t txStore) WithdrawQueued(ctx context.Context, p domain.Payout, at time.Time) (bool, error) {
	return t.s.WithdrawQueued(ctx, t.tx, p, at)
}

func (t txStore) SetSubmitting(ctx context.Context, id, method, rail string) error {
	return t.s.SetSubmitting(ctx, t.tx, id, method, rail)
}

func (t txStore) MethodChangedSince(ctx context.Context, provider, payoutID string, at time.Time) (bool, error) {
	return t.s.MethodChangedSince(ctx, t.tx, provider, payoutID, at)
}

func (t txStore) ResetWorkflow(ctx context.Context, id string) error {
	return t.s.ResetWorkflow(ctx, t.tx, id)
}

// CreateFromSettled gates with min and the minimums set through the API over it.
func (t txStore) CreateFromSettled(ctx context.Context, p domain.Payout, min domain.Minimums) ([]string, error) {
	min, err := minimums(ctx, t.tx, min)
	if err != nil {
		return nil, err
	}
	return t.s.CreateFromSettled(ctx, t.tx, p, min)
}
