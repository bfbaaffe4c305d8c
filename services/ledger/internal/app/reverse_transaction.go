package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/audit"
	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// ReverseInput asks for the reversal of a transaction.
type ReverseInput struct {
	TransactionID  string
	IdempotencyKey string // default "reverse:{transaction_id}"
	Description    string
	EffectiveAt    *time.Time
}

// ReverseTransaction posts the mirror of a transaction and links the two. A
// transaction is reversed at most once: asking again with the same key
// returns the reversal, with another key is a conflict. A transaction a
// service posted and still tracks, which would not see its reversal (a
// payout's own step, a commission sweep posted alone), is not reversed: a
// FailedPrecondition names what to do instead (checkServiceOwned; checked
// after the replay, so a reversal made before the refusal existed still
// answers its own repeat).
func (a *App) ReverseTransaction(ctx context.Context, in ReverseInput) (*domain.Transaction, error) {
	id, err := transactionID(in.TransactionID)
	if err != nil {
		return nil, err
	}
	in.TransactionID = id
	if vs := domain.CheckEffectiveAt(in.EffectiveAt); vs != nil {
		return nil, invalid(vs)
	}
	key, err := reversalKey(in)
	if err != nil {
		return nil, err
	}
	if len(in.Description) > domain.DescriptionMax {
		// As on any transaction: 900 KB went into the immutable journal.
		return nil, apperr.Invalid("description", "at most %d characters", domain.DescriptionMax)
	}
	orig, err := a.getTransaction(ctx, in.TransactionID)
	if err != nil {
		return nil, err
	}
	if orig.Kind == domain.TxReversal {
		return nil, fmt.Errorf("transaction %s is itself a reversal (of %s); post a new entry instead: %w",
			orig.ID, orig.Reverses, apperr.ErrPrecondition)
	}
	desc := in.Description
	if desc == "" {
		desc = "reversal of " + orig.ID
	}
	now := a.now()
	eff, effStr := now, ""
	if in.EffectiveAt != nil {
		eff = in.EffectiveAt.UTC().Truncate(time.Microsecond)
		effStr = eff.Format(time.RFC3339Nano)
	}
	hash, err := domain.RequestHash("reversal", map[string]any{
		"transaction_id": orig.ID, "description": in.Description, "effective_at": effStr})
	if err != nil {
		return nil, err
	}
	t := &domain.Transaction{
		ID: ids.New(""), IdempotencyKey: key, Kind: domain.TxReversal, Description: desc,
		EffectiveAt: eff, CreatedAt: now, Metadata: map[string]string{"reverses": orig.ID},
		Postings: domain.Mirror(orig.Postings), Reverses: orig.ID, RequestHash: hash,
	}
	if orig.Kind == domain.TxClientMoneyFunding || orig.Kind == domain.TxBadDebtWriteOff {
		// The segregation rule sanctions the mirror of finance's funding
		// or write-off by the reversed entry's kind, from the journal.
		t.Metadata[domain.MetaReversesKind] = string(orig.Kind)
	}
	if orig.ReversedBy != "" {
		// Already reversed: a replay returns the reversal, anything else
		// conflicts. A failed read of the key is neither: the database
		// restarting answered the caller's own repeat 409 "already
		// reversed", and it gave up on a reversal it had made. The error
		// goes up as it is (an outage is a 503 to retry, apperr.ToStatus).
		id, h, err := a.Store.TxByKey(ctx, key)
		if err != nil && !errors.Is(err, apperr.ErrNotFound) {
			return nil, fmt.Errorf("reversal of %s: idempotency key %q: %w", orig.ID, key, err)
		}
		if err == nil && id == orig.ReversedBy && bytes.Equal(h, t.RequestHash[:]) {
			markReplayed(ctx, t, id)
			return a.getTransaction(ctx, id)
		}
		return nil, fmt.Errorf("transaction %s is already reversed by %s: %w", orig.ID, orig.ReversedBy, apperr.ErrConflict)
	}
	if err := checkServiceOwned(orig); err != nil {
		return nil, err
	}
	return a.postReversal(ctx, t, orig)
}

// postReversal posts t, the reversal of orig, and links the two; a
// deposit a rail_refund names is not reversed (checkDepositReversal). Its
// ledger.reversed.{orig} message commits with it (the outbox).
// Its audit record, as the interceptor would store it for this answer,
// commits with the reversal (addAudited), as a manual entry's does.
func (a *App) postReversal(ctx context.Context, t, orig *domain.Transaction) (*domain.Transaction, error) {
	rev, err := a.postOne(ctx, t, audited(audit.ClaimFrom(ctx), "transaction_id="+t.ID, "idempotency_key="+t.IdempotencyKey), func(tx Tx) error {
		linked, err := tx.LinkReversal(ctx, t.Reverses, t.ID, t.CreatedAt)
		if err != nil {
			return err
		}
		if !linked {
			return fmt.Errorf("transaction %s was reversed concurrently: %w", t.Reverses, apperr.ErrConflict)
		}
		if err := checkDepositReversal(ctx, tx, orig); err != nil {
			return err
		}
		// ledger.reversed.{orig}: payout fails again a payout settled
		// outside by orig on it, without reading every claim it holds.
		return tx.PublishReversed(ctx, t)
	})
	if err != nil {
		return nil, err
	}
	markReplayed(ctx, t, rev.ID) // a repeat that raced the first
	return rev, nil
}

// reversalKey is the key a reversal posts under: the caller's, or
// reverse:{transaction id}.
func reversalKey(in ReverseInput) (string, error) {
	key := strings.TrimSpace(in.IdempotencyKey)
	if key == "" {
		key = domain.ReversalKeyPrefix + in.TransactionID
	}
	// No service reverses: a reversal under a service's key (a remittance's
	// rem-2026-11-CN-CNY) made that service's own post a conflict for good.
	vs := append(domain.CheckChosenKey(key, domain.ReversalKeyPrefix+in.TransactionID), checkServiceKey(key, false)...)
	if vs != nil {
		return "", invalid(vs)
	}
	if len(key) > domain.IdempotencyKeyMax {
		return "", apperr.Invalid("idempotency_key", "at most 256 characters")
	}
	return key, nil
}
