package metering_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/testkit"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	meteringv1 "github.com/gpubill/gpubill/proto/gen/gpubill/metering/v1"
)

// A closed renter's usage that starts at or after its close is refused, on
// the API with a reason and on NATS dead-lettered and counted; usage that
// started before the close still posts (a late report is legitimate). The
// close is published as the renter's next party.updated version, final:
// replayed it answers the renter as it is, and nothing reopens it. A
// renter could not be changed after creation: creating it again with a
// new credit limit was a 409, and its usage was taken until the end.
func TestClosedRenterUsageAfterTheCloseRefused(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(now)
	s, d := newServiceAt(t, clk)
	ctx := context.Background()
	parties(t, s)
	patch := func(r *meteringv1.Renter, paths ...string) (*meteringv1.Renter, error) {
		res, err := s.Parties().UpdateRenter(ctx, &meteringv1.UpdateRenterRequest{Renter: r, UpdateMask: &fieldmaskpb.FieldMask{Paths: paths}})
		return res.GetRenter(), err
	}
	limited, err := patch(&meteringv1.Renter{RenterId: "r-001", CreditLimit: "500"}, "credit_limit")
	if err != nil || limited.CreditLimit != "500" || limited.Version != 2 || limited.Status != "active" {
		t.Fatalf("credit limit raised: %v, %v; want 500 at version 2, active", limited, err)
	}
	ev := func(id, start, end string) *meteringv1.UsageEventInput {
		return &meteringv1.UsageEventInput{Id: id, LeaseId: "l-" + id, ProviderId: "p-001", RenterId: "r-001", GpuModel: "H100", GpuCount: 1,
			StartTime: start, EndTime: end}
	}
	// Recorded before the close though it starts after it (end_time may be
	// up to 5 minutes ahead): sent again after the close, a duplicate.
	early := ev("early", "2026-11-20T12:01:30Z", "2026-11-20T12:03:00Z")
	if res, err := s.Usage().IngestUsageEvents(ctx, &meteringv1.IngestUsageEventsRequest{Events: []*meteringv1.UsageEventInput{early}}); err != nil || res.Accepted != 1 {
		t.Fatalf("early: %v, %v", res, err)
	}
	closedAt := now.Add(time.Minute)
	clk.Set(closedAt)
	closed, err := patch(&meteringv1.Renter{RenterId: "r-001", Status: "closed"}, "status")
	if err != nil || closed.Status != "closed" || !closed.ClosedAt.AsTime().Equal(closedAt) || closed.Version != 3 || closed.CreditLimit != "500" {
		t.Fatalf("closed: %v, %v; want closed at %s, version 3", closed, err, closedAt)
	}
	clk.Advance(time.Minute)
	if again, err := patch(&meteringv1.Renter{RenterId: "r-001", Status: "closed"}, "status"); err != nil || !proto.Equal(again, closed) {
		t.Fatalf("close replayed: %v, %v; want the renter as closed", again, err)
	}
	for _, give := range []struct {
		r    *meteringv1.Renter
		path string
	}{
		{&meteringv1.Renter{RenterId: "r-001", Status: "active"}, "status"},
		{&meteringv1.Renter{RenterId: "r-001", CreditLimit: "0"}, "credit_limit"},
	} {
		if got, err := patch(give.r, give.path); !errors.Is(err, apperr.ErrPrecondition) {
			t.Fatalf("%s of a closed renter: %v, %v; want refused (closed is final)", give.path, got, err)
		}
	}

	res, err := s.Usage().IngestUsageEvents(ctx, &meteringv1.IngestUsageEventsRequest{Events: []*meteringv1.UsageEventInput{
		ev("before", "2026-11-20T11:00:00Z", "2026-11-20T12:01:30Z"), // started before the close: posts
		ev("at", "2026-11-20T12:01:00Z", "2026-11-20T12:01:30Z"),     // started at the close
		ev("after", "2026-11-20T12:01:30Z", "2026-11-20T12:02:00Z"),
		early,
	}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Accepted != 1 || res.Duplicates != 1 || len(res.Rejected) != 2 || !strings.HasPrefix(res.Rejected[0].Reason, `renter "r-001" closed at 2026-11-20T12:01:00Z`) ||
		res.Rejected[0].Id != "at" || res.Rejected[1].Id != "after" {
		t.Fatalf("ingest after the close: %v; want before accepted, early a duplicate, at and after refused as closed", res)
	}

	publishIngest(t, d.JS, "m-after", `{"events":[{"id":"nats-after","lease_id":"l-n","provider_id":"p-001","renter_id":"r-001","gpu_model":"H100","gpu_count":1,`+
		`"start_time":"2026-11-20T12:01:10Z","end_time":"2026-11-20T12:01:50Z"}]}`)
	var dlErr string
	testkit.Eventually(t, 15*time.Second, func() bool {
		return d.Pool.QueryRow(ctx, `select error from metering.dead_letters where message_id = 'm-after'`).Scan(&dlErr) == nil
	}, "the NATS message of usage after the close dead-lettered")
	if !strings.Contains(dlErr, "rejected for good") || !strings.Contains(dlErr, `renter "r-001" closed at`) {
		t.Fatalf("dead letter %q; want the closed renter named, for good", dlErr)
	}

	cons, err := d.JS.OrderedConsumer(ctx, natsx.StreamParty, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"party.updated.r-001"}})
	if err != nil {
		t.Fatal(err)
	}
	var got []*eventsv1.PartyUpdated
	for len(got) < 3 {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("after %d party updates: %v", len(got), err)
		}
		var p eventsv1.PartyUpdated
		if err := proto.Unmarshal(m.Data(), &p); err != nil {
			t.Fatal(err)
		}
		got = append(got, &p)
	}
	if last := got[2]; last.Version != 3 || last.Status != "closed" || !last.ClosedAt.AsTime().Equal(closedAt) || last.CreditLimit != "500" || got[1].Status != "active" {
		t.Fatalf("party updates %v; want v3 closed at %s", got, closedAt)
	}
}
