package app

import (
	"context"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/pg"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	"github.com/gpubill/gpubill/services/metering/internal/adapters/postgres"
	"github.com/gpubill/gpubill/services/metering/internal/domain"
)

// Rejection is one event refused with its reason.
type Rejection struct {
	Index  int
	ID     string
	Reason string
}

// IngestResult answers an ingest call.
type IngestResult struct {
	Accepted   int
	Duplicates int
	Rejected   []Rejection
}

// IngestOptions narrow an ingest (the NATS path: usage.ingest.{provider}
// may only carry that provider's usage).
type IngestOptions struct {
	OnlyProvider string
}

// ingest validates, deduplicates and records a batch of usage events, and in
// the same transaction puts one usage.recorded.{provider} message per
// provider into the outbox. One bad event never fails the batch. (Ingest,
// in metrics.go, counts what it answers.)
func (a *App) ingest(ctx context.Context, in []domain.EventInput, opt IngestOptions) (IngestResult, error) {
	if len(in) > domain.BatchEventsMax {
		return IngestResult{}, apperr.Invalid("events", "%d events in one call; at most %d", len(in), domain.BatchEventsMax)
	}
	var res IngestResult
	if len(in) == 0 {
		return res, nil
	}
	reject := func(i int, id, reason string) {
		res.Rejected = append(res.Rejected, Rejection{Index: i, ID: id, Reason: reason})
	}
	names := make([]string, 0, 4)
	seenName := map[string]bool{}
	for _, e := range in {
		if !seenName[e.GPUModel] {
			seenName[e.GPUModel] = true
			names = append(names, e.GPUModel)
		}
	}
	models, err := a.knownModels(ctx, names)
	if err != nil {
		return res, err
	}
	now := a.Clock.Now()
	rules := domain.Rules{Now: now, LateArrival: a.LateArrival, KnownModel: func(m string) bool { return models[m] }}

	// Pass 1: each event alone.
	type cand struct {
		idx int
		ev  domain.Event
	}
	cands := make([]cand, 0, len(in))
	provSet, rentSet := map[string]bool{}, map[string]bool{}
	for i, raw := range in {
		ev, reason := domain.Validate(raw, rules)
		if reason == "" && opt.OnlyProvider != "" && ev.ProviderID != opt.OnlyProvider {
			reason = fmt.Sprintf("provider_id %q does not match the subject's provider %q", ev.ProviderID, opt.OnlyProvider)
		}
		if reason != "" {
			reject(i, ev.ID, reason)
			continue
		}
		cands = append(cands, cand{i, ev})
		provSet[ev.ProviderID], rentSet[ev.RenterID] = true, true
	}
	provs, rents, err := a.Store.PartiesOf(ctx, keys(provSet), keys(rentSet))
	if err != nil {
		return res, err
	}

	// Pass 2: parties, repeats and overlaps inside the batch.
	byID := make(map[string]domain.Event, len(cands))
	byLease := map[string][]int32{} // indexes into recs
	recs := make([]postgres.Recorded, 0, len(cands))
	recIdx := make([]int, 0, len(cands))
	for _, c := range cands {
		ev := c.ev
		if _, ok := provs[ev.ProviderID]; !ok {
			reject(c.idx, ev.ID, fmt.Sprintf("unknown provider %q", ev.ProviderID))
			continue
		}
		if _, ok := rents[ev.RenterID]; !ok {
			reject(c.idx, ev.ID, fmt.Sprintf("unknown renter %q", ev.RenterID))
			continue
		}
		if first, ok := byID[ev.ID]; ok {
			if diff := first.Differs(ev); len(diff) > 0 {
				reject(c.idx, ev.ID, domain.ConflictReason(ev.ID, diff))
				continue
			}
			res.Duplicates++
			continue
		}
		overlapped := ""
		for _, o := range byLease[ev.LeaseID] {
			if domain.Overlaps(ev, recs[o].Event) {
				overlapped = recs[o].ID
				break
			}
		}
		if overlapped != "" {
			reject(c.idx, ev.ID, fmt.Sprintf("overlaps %s on lease %s", overlapped, ev.LeaseID))
			continue
		}
		byID[ev.ID] = ev
		byLease[ev.LeaseID] = append(byLease[ev.LeaseID], int32(len(recs)))
		cy := a.Calendar.ForUsageEnd(ev.End)
		status := domain.StatusAccepted
		if now.After(cy.Closes) {
			status = domain.StatusLate
		}
		recs = append(recs, postgres.Recorded{Event: ev, CycleID: cy.ID, Status: status, ReceivedAt: now})
		recIdx = append(recIdx, c.idx)
	}
	if len(recs) == 0 {
		sortRejected(res.Rejected)
		return res, nil
	}

	// Pass 3: against what is recorded, in one transaction with the outbox,
	// holding the locks of the batch's leases.
	leaseIDs := make([]string, 0, len(byLease))
	for l := range byLease {
		leaseIDs = append(leaseIDs, l)
	}
	var accepted []postgres.Recorded
	var dbRejected []Rejection
	var dups int
	err = pg.InTx(ctx, a.Pool, func(tx pgx.Tx) error {
		accepted, dbRejected, dups = make([]postgres.Recorded, 0, len(recs)), nil, 0
		if err := postgres.LockLeases(ctx, tx, leaseIDs); err != nil {
			return err
		}
		inserted, err := a.Store.InsertUsage(ctx, tx, recs)
		if err != nil {
			return err
		}
		var skipped []domain.Event
		var skippedIdx []int
		for i, r := range recs {
			if inserted[r.ID] {
				accepted = append(accepted, r)
				continue
			}
			skipped = append(skipped, r.Event)
			skippedIdx = append(skippedIdx, recIdx[i])
		}
		if len(skipped) > 0 {
			sids := make([]string, len(skipped))
			for i, e := range skipped {
				sids[i] = e.ID
			}
			exist, err := a.Store.Existing(ctx, tx, sids)
			if err != nil {
				return err
			}
			var overlapping []domain.Event
			var overlappingIdx []int
			for i, e := range skipped {
				if stored, ok := exist[e.ID]; ok {
					if diff := stored.Differs(e); len(diff) > 0 {
						dbRejected = append(dbRejected, Rejection{Index: skippedIdx[i], ID: e.ID, Reason: domain.ConflictReason(e.ID, diff)})
						continue
					}
					dups++
					continue
				}
				overlapping = append(overlapping, e)
				overlappingIdx = append(overlappingIdx, skippedIdx[i])
			}
			if len(overlapping) > 0 {
				with, err := a.Store.Overlapping(ctx, tx, overlapping)
				if err != nil {
					return err
				}
				for i, e := range overlapping {
					reason := fmt.Sprintf("overlaps %s on lease %s", with[e.ID], e.LeaseID)
					if with[e.ID] == "" { // cannot happen under LockLeases; say so rather than guess
						reason = fmt.Sprintf("not recorded: conflicting write on lease %s; retry", e.LeaseID)
					}
					dbRejected = append(dbRejected, Rejection{Index: overlappingIdx[i], ID: e.ID, Reason: reason})
				}
			}
		}
		msgs, err := a.recordedMessages(accepted, provs, rents)
		if err != nil {
			return err
		}
		return outbox.Add(ctx, tx, postgres.Schema, msgs...)
	})
	if err != nil {
		return IngestResult{}, fmt.Errorf("record usage: %w", err)
	}
	res.Accepted = len(accepted)
	res.Duplicates += dups
	res.Rejected = append(res.Rejected, dbRejected...)
	sortRejected(res.Rejected)
	return res, nil
}

// recordedMessages groups accepted events by provider, enriched with what
// pricing needs (renter currency, provider tier and PUE, cycle).
func (a *App) recordedMessages(acc []postgres.Recorded, provs map[string]domain.Provider, rents map[string]domain.Renter) ([]outbox.Message, error) {
	groups := map[string]*eventsv1.UsageRecordedBatch{}
	var order []string
	for _, r := range acc {
		b, ok := groups[r.ProviderID]
		if !ok {
			b = &eventsv1.UsageRecordedBatch{BatchId: ids.New("ub")}
			groups[r.ProviderID] = b
			order = append(order, r.ProviderID)
		}
		p := provs[r.ProviderID]
		b.Events = append(b.Events, &eventsv1.UsageEvent{
			Id: r.ID, LeaseId: r.LeaseID, ProviderId: r.ProviderID, RenterId: r.RenterID,
			GpuModel: r.GPUModel, GpuCount: r.GPUCount,
			StartTime: timestamppb.New(r.Start), EndTime: timestamppb.New(r.End),
			Region: r.Region, Workload: r.Workload,
			Currency: rents[r.RenterID].Currency, ProviderTier: p.Tier, ProviderPue: domain.PUEString(p.PUE),
			CycleId: r.CycleID, ReceivedAt: timestamppb.New(r.ReceivedAt),
		})
	}
	msgs := make([]outbox.Message, 0, len(order))
	for _, prov := range order {
		b := groups[prov]
		payload, err := proto.Marshal(b)
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, outbox.Message{ID: b.BatchId, Subject: "usage.recorded." + prov, Payload: payload})
	}
	return msgs, nil
}

func sortRejected(r []Rejection) {
	sort.Slice(r, func(i, j int) bool { return r[i].Index < r[j].Index })
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
