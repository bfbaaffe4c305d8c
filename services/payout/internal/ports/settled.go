package ports

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/subjects"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	"github.com/gpubill/gpubill/services/payout/internal/app"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// SettledConsumerName is the durable consumer of settlement.settled.*.
const SettledConsumerName = app.SettledConsumer

const settledBatchMax = 200

// ConsumeSettled creates one payout per settled provider, cycle and
// currency (app.Payouts.CreateFromSettledMessages: earlier payouts still
// waiting join it; exactly once per message) and nudges the workflow
// starter (which also polls, so a nudge before the commit is harmless).
// The workflows of payouts that joined a new one are woken (their
// Prepare waits on the row lock until this batch commits, then sees them
// canceled and ends). Undecodable messages, and those that keep failing,
// go to dl.
func ConsumeSettled(ctx context.Context, js jetstream.JetStream, payouts *app.Payouts, log *slog.Logger, flow *Workflows, dl natsx.DeadLetters) error {
	spec := natsx.ConsumerSpec{Stream: natsx.StreamSettlement, Durable: SettledConsumerName, FilterSubjects: []string{subjects.ProviderSettled.All()},
		BatchMax: settledBatchMax, DeadLetters: dl}
	return outbox.ConsumeDecoded(ctx, js, log, spec, func(ctx context.Context, ids []string, evs []*eventsv1.ProviderSettled) error {
		msgs := make([]app.SettledMessage, len(evs))
		var poison natsx.PoisonError
		for i, ev := range evs {
			p, err := settledPayout(ev, payouts.Clock.Now())
			if err != nil {
				poison.Add(ids[i], err) // dead-lettered at once; the rest handed back
				continue
			}
			msgs[i] = app.SettledMessage{ID: ids[i], Payout: p}
		}
		if len(poison.ByID) > 0 {
			return &poison
		}
		joined, err := payouts.CreateFromSettledMessages(ctx, msgs)
		if err != nil {
			return err
		}
		if flow != nil {
			flow.Nudge()
			flow.Wake(context.WithoutCancel(ctx), joined...)
		}
		return nil
	})
}

// settledPayout is the payout a settled statement asks for, under the id
// derived from its provider, cycle and currency (domain.PayoutID). An
// unknown currency, or an amount finer than its minor units (stored as
// sent, the ledger posted it rounded and the rail paid it rounded or
// refused it: a fen between the payout and its postings), is refused.
func settledPayout(ev *eventsv1.ProviderSettled, now time.Time) (domain.Payout, error) {
	cur, err := money.Lookup(ev.Currency)
	if err != nil {
		return domain.Payout{}, fmt.Errorf("settled event of %s: %w", ev.ProviderId, err)
	}
	id, err := domain.PayoutID(ev.ProviderId, ev.CycleId, cur.Code)
	if err != nil {
		return domain.Payout{}, fmt.Errorf("settled event of %s: %w", ev.ProviderId, err)
	}
	p := domain.Payout{ID: id, ProviderID: ev.ProviderId, CycleID: ev.CycleId, Currency: cur.Code, CreatedAt: now}
	for _, f := range []struct {
		dst  *decimal.Decimal
		name string
		s    string
	}{{&p.Gross, "gross", ev.Gross}, {&p.Commission, "commission", ev.Commission}, {&p.Tax, "tax_withheld", ev.TaxWithheld}, {&p.Net, "net", ev.Net}} {
		d, err := cur.Parse(f.s)
		if err != nil {
			return p, fmt.Errorf("settled event of %s: %s %q: %w", ev.ProviderId, f.name, f.s, err)
		}
		*f.dst = d
	}
	return p, nil
}
