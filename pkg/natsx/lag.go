package natsx

import (
	"context"
	"fmt"
	"sort"

	"github.com/nats-io/nats.go/jetstream"
)

// Lag is one durable consumer's backlog: what was published to its stream
// and not yet processed. A growing Pending with a flat Delivered is a stalled
// consumer (an accepted event that is not being charged).
type Lag struct {
	Stream      string `json:"stream"`
	Consumer    string `json:"consumer"`
	Pending     uint64 `json:"pending"`       // not yet delivered
	AckPending  int    `json:"ack_pending"`   // delivered, not yet acked
	Redelivered int    `json:"redelivered"`   // delivered more than once, not yet acked
	Delivered   uint64 `json:"delivered_seq"` // last stream sequence delivered
}

// ConsumerLags lists every durable consumer of the named streams.
func ConsumerLags(ctx context.Context, js jetstream.JetStream, streams ...string) ([]Lag, error) {
	if len(streams) == 0 {
		for n := range streamSpecs {
			streams = append(streams, n)
		}
	}
	sort.Strings(streams)
	var out []Lag
	for _, name := range streams {
		st, err := js.Stream(ctx, name)
		if err != nil {
			continue // not created yet
		}
		lister := st.ListConsumers(ctx)
		for ci := range lister.Info() {
			out = append(out, Lag{Stream: name, Consumer: ci.Name, Pending: ci.NumPending, AckPending: ci.NumAckPending,
				Redelivered: ci.NumRedelivered, Delivered: ci.Delivered.Stream})
		}
		if err := lister.Err(); err != nil {
			return nil, fmt.Errorf("consumers of %s: %w", name, err)
		}
	}
	return out, nil
}
