package ports

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/subjects"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	"github.com/gpubill/gpubill/services/payout/internal/app"
)

// WakeOnCredits wakes the payouts waiting for their provider's available
// (insufficient_available) whenever a ledger transaction credits that
// provider:{id}:available (ledger.posted.provider), so they go on as soon
// as they are covered. A wake is only a hint (the workflow asks the ledger
// again): a message missed while payout was down delays a payout until
// its gate's periodic re-check, nothing more.
func WakeOnCredits(ctx context.Context, js jetstream.JetStream, store app.Store, flow *Workflows, log *slog.Logger) error {
	it := natsx.OrderedMessages(ctx, js, log, "payout-credits", natsx.StreamLedger, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subjects.LedgerPosted.Of(ids.ClassProvider)}, DeliverPolicy: jetstream.DeliverNewPolicy})
	if it == nil {
		return nil // ctx ended before NATS answered
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	for {
		m, err := it.Next()
		if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
			return nil
		}
		if err != nil {
			log.Warn("ledger.posted.provider", "err", err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
			continue
		}
		var b eventsv1.LedgerPostedBatch
		if err := proto.Unmarshal(m.Data(), &b); err != nil {
			log.Warn("ledger.posted.provider: undecodable batch, ignored (wakes are hints)", "subject", m.Subject(), "err", err)
			continue
		}
		for provider := range creditedProviders(&b) {
			ids, err := store.WaitingForAvailable(ctx, provider)
			if err != nil {
				log.Warn("payouts waiting for available", "provider_id", provider, "err", err)
				continue
			}
			flow.Wake(ctx, ids...)
		}
	}
}

// creditedProviders lists the providers whose available a batch credits.
func creditedProviders(b *eventsv1.LedgerPostedBatch) map[string]bool {
	out := map[string]bool{}
	for _, tx := range b.Transactions {
		for _, p := range tx.Postings {
			a, err := ids.ParseAddress(p.Account)
			if err == nil && a.Class == ids.ClassProvider && a.Sub == ids.SubAvailable && p.Direction == "credit" {
				out[a.Party] = true
			}
		}
	}
	return out
}
