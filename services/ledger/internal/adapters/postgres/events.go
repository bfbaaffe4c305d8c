package postgres

import (
	"context"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/subjects"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// publishPosted puts the ledger.posted events of fresh transactions into the
// outbox. Their ids are new (a batch's is its first transaction's fresh id),
// so a batch's (batchMin) are copied in: nothing to skip.
func (t *Tx) publishPosted(ctx context.Context, fresh []*domain.Transaction) error {
	if len(fresh) >= batchMin {
		return outbox.Copy(ctx, t.tx, Schema, postedEvents(fresh)...)
	}
	return outbox.Add(ctx, t.tx, Schema, postedEvents(fresh)...)
}

// PublishDepletions puts billing.wallet.depleted.{renter} into the outbox.
func (t *Tx) PublishDepletions(ctx context.Context, ds []domain.WalletDepletion) error {
	return outbox.Add(ctx, t.tx, Schema, depletedEvents(ds)...)
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
		out = append(out, outbox.Message{ID: "wallet-depleted-" + d.TransactionID + "-" + d.Currency,
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
			out = append(out, outbox.Message{ID: o.b.BatchId, Subject: subjects.LedgerPosted.Of(string(c)), Payload: payload})
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
