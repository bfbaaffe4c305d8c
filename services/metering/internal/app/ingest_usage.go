package app

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/pg"
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

// Ingest validates, deduplicates and records a batch of usage events, and in
// the same transaction puts one usage.recorded.{provider} message per
// provider into the outbox. One bad event never fails the batch.
func (a *App) Ingest(ctx context.Context, in []domain.EventInput, opt IngestOptions) (IngestResult, error) {
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
	byID := make(map[string]bool, len(cands))
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
		if byID[ev.ID] {
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
		byID[ev.ID] = true
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
			exist, err := a.Store.ExistingIDs(ctx, tx, sids)
			if err != nil {
				return err
			}
			var overlapping []domain.Event
			var overlappingIdx []int
			for i, e := range skipped {
				if exist[e.ID] {
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
// pricing needs (renter currency, provider tier and PUE, cycle), each group
// one eventsv1.UsageRecordedBatch encoded by appendUsageEvent (the
// generated marshaller allocated three messages per event).
func (a *App) recordedMessages(acc []postgres.Recorded, provs map[string]domain.Provider, rents map[string]domain.Renter) ([]outbox.Message, error) {
	groups := map[string][]int{}
	var order []string
	for i, r := range acc {
		g, ok := groups[r.ProviderID]
		if !ok {
			order = append(order, r.ProviderID)
		}
		groups[r.ProviderID] = append(g, i)
	}
	msgs := make([]outbox.Message, 0, len(order))
	var ev []byte
	for _, prov := range order {
		idx := groups[prov]
		p := provs[prov]
		pue := domain.PUEString(p.PUE)
		batchID := ids.New("ub")
		payload := make([]byte, 0, 8+len(batchID)+len(idx)*192)
		payload = appendString(payload, 1, batchID)
		for _, i := range idx {
			r := &acc[i]
			ev = appendUsageEvent(ev[:0], r, rents[r.RenterID].Currency, p.Tier, pue)
			payload = protowire.AppendTag(payload, 2, protowire.BytesType)
			payload = protowire.AppendBytes(payload, ev)
		}
		msgs = append(msgs, outbox.Message{ID: batchID, Subject: "usage.recorded." + prov, Payload: payload})
	}
	return msgs, nil
}

// appendUsageEvent appends the wire form of the eventsv1.UsageEvent of r
// (fields in number order, proto3 defaults omitted, as proto.Marshal does).
func appendUsageEvent(b []byte, r *postgres.Recorded, currency, tier, pue string) []byte {
	b = appendString(b, 1, r.ID)
	b = appendString(b, 2, r.LeaseID)
	b = appendString(b, 3, r.ProviderID)
	b = appendString(b, 4, r.RenterID)
	b = appendString(b, 5, r.GPUModel)
	if r.GPUCount != 0 {
		b = protowire.AppendTag(b, 6, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(int64(r.GPUCount)))
	}
	b = appendTimestamp(b, 7, r.Start)
	b = appendTimestamp(b, 8, r.End)
	b = appendString(b, 9, r.Region)
	b = appendString(b, 10, r.Workload)
	b = appendString(b, 11, currency)
	b = appendString(b, 12, tier)
	b = appendString(b, 13, pue)
	b = appendString(b, 14, r.CycleID)
	return appendTimestamp(b, 15, r.ReceivedAt)
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// appendTimestamp appends t as a google.protobuf.Timestamp field (always
// present, like a non-nil timestamppb.New(t)).
func appendTimestamp(b []byte, num protowire.Number, t time.Time) []byte {
	sec, nanos := t.Unix(), int64(int32(t.Nanosecond()))
	n := 0
	if sec != 0 {
		n += 1 + protowire.SizeVarint(uint64(sec))
	}
	if nanos != 0 {
		n += 1 + protowire.SizeVarint(uint64(nanos))
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	if sec != 0 {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(sec))
	}
	if nanos != 0 {
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(nanos))
	}
	return b
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
