package postgres

import (
	"context"
	"fmt"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/audit"
	"github.com/gpubill/gpubill/pkg/eventwire"
	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/subjects"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// publishPosted puts the ledger.posted events of fresh transactions into the
// outbox. Their ids are new (a batch's is its first transaction's fresh id),
// so a batch's (batchMin) are copied in: nothing to skip.
// A batch's are also held for this process's relay once the write commits
// (outbox.Hold, in WithTx), so it publishes them without reading them back.
func (t *Tx) publishPosted(ctx context.Context, fresh []*domain.Transaction) error {
	if len(fresh) >= batchMin {
		msgs := postedEvents(fresh)
		if err := outbox.Copy(ctx, t.tx, Schema, msgs...); err != nil {
			return err
		}
		t.held = append(t.held, msgs...)
		return nil
	}
	return outbox.Add(ctx, t.tx, Schema, postedEvents(fresh)...)
}

// PublishDepletions puts billing.wallet.depleted.{renter} into the outbox.
func (t *Tx) PublishDepletions(ctx context.Context, ds []domain.WalletDepletion) error {
	return outbox.Add(ctx, t.tx, Schema, depletedEvents(ds)...)
}

// PublishReversed implements app.Tx: ledger.reversed.{rev.Reverses}, the
// reversal's LedgerPosted (its postings as ledger.posted carries them),
// under ledger-reversed-{rev.ID}. The reversed transaction is the
// subject's key: a consumer filters on it and needs no other field.
func (t *Tx) PublishReversed(ctx context.Context, rev *domain.Transaction) error {
	if rev.Reverses == "" {
		return fmt.Errorf("ledger.reversed of %s: it reverses nothing", rev.ID)
	}
	return outbox.Add(ctx, t.tx, Schema, outbox.Message{ID: "ledger-reversed-" + rev.ID,
		Subject: subjects.LedgerReversed.Of(rev.Reverses), Payload: appendPosted(nil, rev)})
}

// AddAuditRecords implements app.Tx: the records of audited for this
// schema's outbox, joined as PostNew joins them (auditMessages).
func (t *Tx) AddAuditRecords(ctx context.Context, audited []app.Audited) ([]*audit.Claim, error) {
	msgs, claims := auditMessages(audited)
	if err := outbox.Add(ctx, t.tx, Schema, msgs...); err != nil {
		return nil, fmt.Errorf("audit records: %w", err)
	}
	t.audited = t.audited || len(msgs) > 0
	return claims, nil
}

// depletedEvents are billing.wallet.depleted.{renter} messages of ds.
func depletedEvents(ds []domain.WalletDepletion) []outbox.Message {
	out := make([]outbox.Message, 0, len(ds))
	for _, d := range ds {
		payload, err := proto.Marshal(&eventsv1.WalletDepleted{RenterId: d.RenterID, Currency: d.Currency,
			Balance: d.Balance.String(), TransactionId: d.TransactionID, At: timestamppb.New(d.At)})
		if err != nil {
			continue // a message of strings and a timestamp always marshals
		}
		out = append(out, outbox.Message{ID: "wallet-depleted-" + d.TransactionID + "-" + d.RenterID + "-" + d.Currency,
			Subject: subjects.WalletDepleted.Of(d.RenterID), Payload: payload})
	}
	return out
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
//
// The payloads are written with protowire, byte for byte what proto.Marshal
// writes for the same LedgerPostedBatch (TestPostedEventsAreProtobuf): each
// transaction's LedgerPosted is encoded once and appended to every class's
// batch it belongs in, where building the messages and marshalling them
// encoded it once per class and cost a fetched batch of charges more than
// any other step of its write in this process.
func postedEvents(txs []*domain.Transaction) []outbox.Message {
	if len(txs) == 0 {
		return nil
	}
	type open struct {
		id string
		b  []byte // the LedgerPostedBatch so far
	}
	var out []outbox.Message
	var classes []domain.Class
	batches := map[domain.Class]*open{}
	flush := func(c domain.Class) {
		if o := batches[c]; o != nil {
			out = append(out, outbox.Message{ID: o.id, Subject: subjects.LedgerPosted.Of(string(c)), Payload: o.b})
			delete(batches, c)
		}
	}
	var ev []byte // one transaction's LedgerPosted
	for n, t := range txs {
		ev = appendPosted(ev[:0], t)
		size := protowire.SizeTag(eventwire.PostedBatchTransactions) + protowire.SizeBytes(len(ev))
		for i, p := range t.Postings {
			c := p.Account.Class
			dup := false
			for _, q := range t.Postings[:i] {
				dup = dup || q.Account.Class == c
			}
			if dup {
				continue // one entry per transaction in each class's batch
			}
			if o := batches[c]; o != nil && len(o.b)+size > postedPayloadMax {
				flush(c)
			}
			o := batches[c]
			if o == nil {
				o = &open{id: "ledger-posted-" + t.ID + "-" + string(c)}
				o.b = eventwire.AppendString(make([]byte, 0, min(postedPayloadMax, 64+(len(txs)-n)*size)), eventwire.PostedBatchID, o.id)
				batches[c] = o
				if !slices.Contains(classes, c) {
					classes = append(classes, c)
				}
			}
			o.b = protowire.AppendTag(o.b, eventwire.PostedBatchTransactions, protowire.BytesType)
			o.b = protowire.AppendBytes(o.b, ev)
		}
	}
	for _, c := range classes {
		flush(c)
	}
	return out
}

// appendPosted appends t as a LedgerPosted message's body.
func appendPosted(b []byte, t *domain.Transaction) []byte {
	b = eventwire.AppendString(b, eventwire.PostedTransactionID, t.ID)
	b = eventwire.AppendString(b, eventwire.PostedIdempotencyKey, t.IdempotencyKey)
	b = eventwire.AppendTimestamp(b, eventwire.PostedEffectiveAt, t.EffectiveAt)
	b = eventwire.AppendTimestamp(b, eventwire.PostedCreatedAt, t.CreatedAt)
	for _, p := range t.Postings {
		n := sizeString(eventwire.PostingAccount, p.Account.Address) + sizeString(eventwire.PostingDirection, string(p.Direction))
		amount := money.DecimalString(p.Amount)
		n += sizeString(eventwire.PostingAmount, amount) + sizeString(eventwire.PostingCurrency, p.Currency)
		b = protowire.AppendTag(b, eventwire.PostedPostings, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(n))
		b = eventwire.AppendString(b, eventwire.PostingAccount, p.Account.Address)
		b = eventwire.AppendString(b, eventwire.PostingDirection, string(p.Direction))
		b = eventwire.AppendString(b, eventwire.PostingAmount, amount)
		b = eventwire.AppendString(b, eventwire.PostingCurrency, p.Currency)
	}
	return b
}

// sizeString is what eventwire.AppendString appends for s.
func sizeString(f protowire.Number, s string) int {
	if s == "" {
		return 0
	}
	return protowire.SizeTag(f) + protowire.SizeBytes(len(s))
}
