package ceiling

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpubill/gpubill/pkg/testkit"
)

// TestJetStreamDoesNotWaitOutItsLastPull: the ceiling's messages are all
// in the stream before it pulls, so a run of fetchMax+44 messages takes a
// small part of fetchWait. A last pull asking for more than are left waits
// out fetchWait for them (the run then takes more than it).
func TestJetStreamDoesNotWaitOutItsLastPull(t *testing.T) {
	ctx := testkit.Context(t)
	js := testkit.NewJetStream(t)
	if _, err := js.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "CEILING", Subjects: []string{"ceiling.>"}}); err != nil {
		t.Fatal(err)
	}
	msgs := fetchMax + 44
	decoded := 0
	msgsFig, events := JetStream(t, ctx, js.JS, "CEILING", func(int) string { return "ceiling.x" }, func(int) []byte { return []byte("usage") }, 10, msgs,
		func([]byte) error {
			decoded++
			return nil
		}, nil)
	if decoded != msgs || msgsFig.N != msgs || events.N != 10*msgs {
		t.Fatalf("decoded %d messages, figures of %d messages and %d events; want %d and %d", decoded, msgsFig.N, events.N, msgs, 10*msgs)
	}
	if took := time.Duration(float64(msgs) / msgsFig.Value * float64(time.Second)); took > fetchWait/2 {
		t.Fatalf("%d messages took %s: a pull waited for messages the stream does not hold (fetchWait %s)", msgs, took, fetchWait)
	}
}
