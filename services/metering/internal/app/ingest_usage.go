package app

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/gpucatalog"
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

// IngestOptions narrow an ingest.
type IngestOptions struct {
	// OnlyProvider, when set, refuses each event of another provider: the
	// provider of usage.ingest.{provider} on NATS, or of a meter token's
	// subject on the API.
	OnlyProvider string
	// Arrived is when the events reached gpubill (domain.Rules.Arrived);
	// zero: now.
	Arrived time.Time
}

func (r *IngestResult) reject(i int, id, reason string) {
	r.Rejected = append(r.Rejected, Rejection{Index: i, ID: id, Reason: reason})
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
	models, err := a.knownModels(ctx)
	if err != nil {
		return res, err
	}
	now := a.Clock.Now()
	rules := domain.Rules{Now: now, LateArrival: a.LateArrival, Arrived: opt.Arrived, KnownModel: func(m string) bool { _, ok := models.Resolve(m); return ok }}
	in = canonicalModels(in, models)

	cands, provIDs, rentIDs := validateEach(in, rules, opt, &res)
	lateDups, err := a.repeats(ctx, in, rules, &res, "too_late")
	if err != nil {
		return res, err
	}
	provs, rents, err := a.Store.PartiesOf(ctx, provIDs, rentIDs)
	if err != nil {
		return res, err
	}
	rec, err := a.judgeAndRecord(ctx, cands, provs, rents, now, opt.OnlyProvider)
	if err != nil {
		return IngestResult{}, err
	}
	// A closed renter's event recorded before the close (its start up to
	// the end_time limit in the future) and sent again is a duplicate.
	closedDups, err := a.repeats(ctx, in, rules, &rec, "renter_closed")
	if err != nil {
		return res, err
	}
	res.Accepted, res.Duplicates = rec.Accepted, rec.Duplicates+lateDups+closedDups
	res.Rejected = append(res.Rejected, rec.Rejected...)
	sortRejected(res.Rejected)
	return res, nil
}

// judgeAndRecord is passes 2 and 3 over the candidates, in rounds.
func (a *App) judgeAndRecord(ctx context.Context, cands []candidate, provs map[string]domain.Provider, rents map[string]domain.Renter, now time.Time, onlyProvider string) (IngestResult, error) {
	// The answer is the one the call's events would get sent one by one, in
	// order: each judged against recorded usage and the call's events before
	// it that were recorded. Pass 2 judges an event against the batch's
	// earlier events; if pass 3 then rejects one of those against recorded
	// usage, the transaction rolls back and the call is judged again in a
	// new one: first each event against recorded usage alone (under the
	// leases' locks), then the rest against each other. (Recorded usage is
	// never removed, so a rejection against it still holds there.)
	var carried []Rejection // pass 3's rejections of earlier rounds
	for rejudge := false; ; rejudge = true {
		var (
			round IngestResult
			b     batch
			pre   recordResult // what recorded usage alone answers, in a re-judged round
			rec   recordResult
			err   error
		)
		if !rejudge {
			b = a.checkBatch(cands, provs, rents, now, &round)
		}
		if rejudge || len(b.recs) > 0 {
			err = a.Store.WithTx(ctx, func(tx Tx) error {
				if rejudge {
					live, p, err := againstRecorded(ctx, tx, cands, onlyProvider)
					if err != nil {
						return err
					}
					round, pre = IngestResult{}, p
					if b = a.checkBatch(live, provs, rents, now, &round); len(b.recs) == 0 {
						rec = recordResult{}
						return nil
					}
				}
				var err error
				rec, err = record(ctx, tx, b, onlyProvider)
				if err != nil {
					return err
				}
				if rec.undercuts(b) {
					return errJudgeAgain
				}
				return tx.PublishRecorded(ctx, rec.accepted, provs, rents)
			})
		}
		if errors.Is(err, errJudgeAgain) {
			ingestRejudged.Inc()
			cands = without(cands, rec.rejected)
			carried = append(carried, rec.rejected...)
			continue
		}
		if err != nil {
			return IngestResult{}, fmt.Errorf("record usage: %w", err)
		}
		return IngestResult{Accepted: len(rec.accepted), Duplicates: pre.dups + round.Duplicates + rec.dups,
			Rejected: slices.Concat(carried, pre.rejected, round.Rejected, rec.rejected)}, nil
	}
}

// againstRecorded takes out of cands what recorded usage answers alone,
// holding the locks of their leases: a repeat of a recorded id (a
// duplicate, or a conflict), an event naming other parties than its
// lease's recorded usage, an event overlapping recorded time. A later copy
// of an id stays for pass 2 to judge against the first.
func againstRecorded(ctx context.Context, tx Tx, cands []candidate, onlyProvider string) ([]candidate, recordResult, error) {
	var out recordResult
	ids := make([]string, 0, len(cands))
	leases := map[string]bool{}
	for _, c := range cands {
		ids = append(ids, c.ev.ID)
		leases[c.ev.LeaseID] = true
	}
	leaseIDs := keys(leases)
	if err := tx.LockLeases(ctx, leaseIDs); err != nil {
		return nil, out, err
	}
	exist, err := tx.Existing(ctx, ids)
	if err != nil {
		return nil, out, err
	}
	parties, err := tx.LeaseParties(ctx, leaseIDs)
	if err != nil {
		return nil, out, err
	}
	reject := func(c candidate, reason string) {
		out.rejected = append(out.rejected, Rejection{Index: c.idx, ID: c.ev.ID, Reason: reason})
	}
	var probe []domain.Event
	first := map[string]bool{}
	keep := make([]bool, len(cands))
	for i, c := range cands {
		if stored, ok := exist[c.ev.ID]; ok {
			if diff := stored.Differs(c.ev); len(diff) > 0 {
				reject(c, domain.RecordedConflictReason(stored, c.ev, onlyProvider))
			} else {
				out.dups++
			}
			continue
		}
		p := domain.LeaseParties{ProviderID: c.ev.ProviderID, RenterID: c.ev.RenterID}
		if ps := parties[c.ev.LeaseID]; len(ps) > 0 && !slices.Contains(ps, p) {
			reject(c, domain.RecordedLeaseReason(c.ev.LeaseID, ps, onlyProvider))
			continue
		}
		keep[i] = true
		if !first[c.ev.ID] {
			first[c.ev.ID] = true
			probe = append(probe, c.ev)
		}
	}
	with, err := tx.Overlapping(ctx, probe)
	if err != nil {
		return nil, out, err
	}
	live := make([]candidate, 0, len(cands))
	probed := map[string]bool{}
	for i, c := range cands {
		if !keep[i] {
			continue
		}
		if o := with[c.ev.ID]; o != "" && !probed[c.ev.ID] {
			probed[c.ev.ID] = true
			reject(c, fmt.Sprintf("overlaps %s on lease %s", o, c.ev.LeaseID))
			continue
		}
		probed[c.ev.ID] = true
		live = append(live, c)
	}
	return live, out, nil
}

// errJudgeAgain rolls back a round of ingest whose batch was judged against
// an event pass 3 rejected.
var errJudgeAgain = errors.New("ingest: judge the batch again without the events recorded usage rejects")

// without is cands less the events rejected.
func without(cands []candidate, rejected []Rejection) []candidate {
	drop := make(map[int]bool, len(rejected))
	for _, r := range rejected {
		drop[r.Index] = true
	}
	return slices.DeleteFunc(cands, func(c candidate) bool { return drop[c.idx] })
}

// canonicalModels names each event's GPU model by its catalogue id: an
// alias (RTX4090D, any case) is recorded as RTX_4090D, so pricing and every
// later reader see one name per model. An unknown name is left for
// validation to reject. The caller's slice is never changed: a batch whose
// names are all canonical (the usual one) is returned as it is, any other
// is copied first (copying every batch was ~2.4 % of the pipeline bench's
// allocated bytes).
func canonicalModels(in []domain.EventInput, models gpucatalog.Index) []domain.EventInput {
	var out []domain.EventInput
	for i := range in {
		id, ok := models.Resolve(in[i].GPUModel)
		if !ok || id == in[i].GPUModel {
			continue
		}
		if out == nil {
			out = slices.Clone(in)
		}
		out[i].GPUModel = id
	}
	if out == nil {
		return in
	}
	return out
}

// candidate is an event that passed the checks on its own, with its index
// in the call.
type candidate struct {
	idx int
	ev  domain.Event
}

// validateEach is pass 1: each event alone (fields, model, times, and the
// subject's provider). It returns the candidates and the parties they name.
func validateEach(in []domain.EventInput, rules domain.Rules, opt IngestOptions, res *IngestResult) ([]candidate, []string, []string) {
	cands := make([]candidate, 0, len(in))
	provSet, rentSet := map[string]bool{}, map[string]bool{}
	for i, raw := range in {
		ev, reason := domain.Validate(raw, rules)
		if reason == "" && opt.OnlyProvider != "" && ev.ProviderID != opt.OnlyProvider {
			reason = fmt.Sprintf("provider_id %q does not match the subject's provider %q", ev.ProviderID, opt.OnlyProvider)
		}
		if reason != "" {
			res.reject(i, ev.ID, reason)
			continue
		}
		cands = append(cands, candidate{i, ev})
		provSet[ev.ProviderID], rentSet[ev.RenterID] = true, true
	}
	return cands, keys(provSet), keys(rentSet)
}

// repeats takes out of res's rejections of class the events that repeat a
// recorded event with the same body, and answers how many: a repeat is a
// duplicate forever (an agent resending its spool after an outage was told
// usage that was billed had been refused as older than the late-arrival
// limit). Another body under a recorded id stays refused.
func (a *App) repeats(ctx context.Context, in []domain.EventInput, rules domain.Rules, res *IngestResult, class string) (int, error) {
	late := map[int]domain.Event{} // by index in the call
	ids := map[string]bool{}
	for _, r := range res.Rejected {
		if rejectReasonClass(r.Reason) == class {
			ev, _ := domain.Validate(in[r.Index], rules) // parsed in full before the limit is checked
			late[r.Index], ids[ev.ID] = ev, true
		}
	}
	if len(late) == 0 {
		return 0, nil
	}
	var exist map[string]domain.Event
	if err := a.Store.WithTx(ctx, func(tx Tx) (err error) {
		exist, err = tx.Existing(ctx, keys(ids))
		return err
	}); err != nil {
		return 0, err
	}
	dups := 0
	res.Rejected = slices.DeleteFunc(res.Rejected, func(r Rejection) bool {
		ev, isLate := late[r.Index]
		stored, ok := exist[ev.ID]
		if isLate && ok && len(stored.Differs(ev)) == 0 {
			dups++
			return true
		}
		return false
	})
	return dups, nil
}

// batch is what pass 2 leaves to record: events to insert (recs), the index
// in the call of each (recIdx), and the batch's leases; judged names the
// events of recs another event of the call was refused or counted a
// duplicate against.
type batch struct {
	recs    []domain.Recorded
	recIdx  []int
	byLease map[string][]int32 // lease → indexes into recs
	judged  map[string]bool
}

// checkBatch is pass 2: parties, repeats and overlaps inside the batch. An
// event is judged against the batch's events before it that it keeps: a
// lease's first one names its parties for the rest.
func (a *App) checkBatch(cands []candidate, provs map[string]domain.Provider, rents map[string]domain.Renter, now time.Time, res *IngestResult) batch {
	byID := make(map[string]int, len(cands)) // id → index into recs
	var cy cycles.Cycle                      // the last event's cycle
	b := batch{
		recs:    make([]domain.Recorded, 0, len(cands)),
		recIdx:  make([]int, 0, len(cands)),
		byLease: map[string][]int32{},
	}
	against := func(i int) {
		if b.judged == nil {
			b.judged = map[string]bool{}
		}
		b.judged[b.recs[i].ID] = true
	}
	for i := range cands {
		c := &cands[i]
		ev := c.ev
		if _, ok := provs[ev.ProviderID]; !ok {
			res.reject(c.idx, ev.ID, fmt.Sprintf("unknown provider %q", ev.ProviderID))
			continue
		}
		r, ok := rents[ev.RenterID]
		if !ok {
			res.reject(c.idx, ev.ID, fmt.Sprintf("unknown renter %q", ev.RenterID))
			continue
		}
		if reason := r.RefusesUsage(ev.Start); reason != "" {
			res.reject(c.idx, ev.ID, reason)
			continue
		}
		if first, ok := byID[ev.ID]; ok {
			against(first)
			if diff := b.recs[first].Differs(ev); len(diff) > 0 {
				res.reject(c.idx, ev.ID, domain.ConflictReason(ev.ID, diff))
				continue
			}
			res.Duplicates++
			continue
		}
		if lease := b.byLease[ev.LeaseID]; len(lease) > 0 {
			first := b.recs[lease[0]]
			if p := (domain.LeaseParties{ProviderID: first.ProviderID, RenterID: first.RenterID}); p != (domain.LeaseParties{ProviderID: ev.ProviderID, RenterID: ev.RenterID}) {
				against(int(lease[0]))
				// p is of the call's own events: to a meter bound to a
				// provider, that provider's (pass 1).
				res.reject(c.idx, ev.ID, domain.LeaseReason(ev.LeaseID, p)+" in this batch")
				continue
			}
		}
		if o := b.overlapping(ev); o >= 0 {
			against(o)
			res.reject(c.idx, ev.ID, fmt.Sprintf("overlaps %s on lease %s", b.recs[o].ID, ev.LeaseID))
			continue
		}
		byID[ev.ID] = len(b.recs)
		b.byLease[ev.LeaseID] = append(b.byLease[ev.LeaseID], int32(len(b.recs)))
		if cy.ID == "" || !cy.HoldsUsageEnd(ev.End) {
			cy = a.Calendar.ForUsageEnd(ev.End)
		}
		status := domain.StatusAccepted
		if now.After(cy.Closes) {
			status = domain.StatusLate
		}
		b.recs = append(b.recs, domain.Recorded{Event: ev, CycleID: cy.ID, Status: status, ReceivedAt: now})
		b.recIdx = append(b.recIdx, c.idx)
	}
	return b
}

// overlapping is the index in recs of the event on ev's lease that ev
// overlaps (-1 for none).
func (b *batch) overlapping(ev domain.Event) int {
	for _, o := range b.byLease[ev.LeaseID] {
		if domain.Overlaps(ev, b.recs[o].Event) {
			return int(o)
		}
	}
	return -1
}

// recordResult is pass 3's outcome.
type recordResult struct {
	accepted []domain.Recorded
	rejected []Rejection
	dups     int
}

// undercuts reports whether pass 3 rejected an event of b that pass 2
// judged another against: that one's answer was wrong.
func (r recordResult) undercuts(b batch) bool {
	for _, rej := range r.rejected {
		if b.judged[rej.ID] {
			return true
		}
	}
	return false
}

// record is pass 3: against what is recorded, inside the transaction that
// also writes the outbox, holding the locks of the batch's leases. An event
// the insert skipped is a duplicate, a conflicting repeat of an id, or an
// overlap with recorded time.
func record(ctx context.Context, tx Tx, b batch, onlyProvider string) (recordResult, error) {
	leaseIDs := make([]string, 0, len(b.byLease))
	for l := range b.byLease {
		leaseIDs = append(leaseIDs, l)
	}
	if err := tx.LockLeases(ctx, leaseIDs); err != nil {
		return recordResult{}, err
	}
	out := recordResult{}
	b, err := otherParties(ctx, tx, b, leaseIDs, onlyProvider, &out)
	if err != nil {
		return recordResult{}, err
	}
	if len(b.recs) == 0 {
		return out, nil
	}
	inserted, err := tx.InsertUsage(ctx, b.recs)
	if err != nil {
		return recordResult{}, err
	}
	if len(inserted) == len(b.recs) { // the usual batch: every event went in
		out.accepted = b.recs
		return out, nil
	}
	out.accepted = make([]domain.Recorded, 0, len(b.recs))
	var skipped []domain.Event
	var skippedIdx []int
	for i, r := range b.recs {
		if inserted[r.ID] {
			out.accepted = append(out.accepted, r)
			continue
		}
		skipped = append(skipped, r.Event)
		skippedIdx = append(skippedIdx, b.recIdx[i])
	}
	if len(skipped) > 0 {
		if err := explainSkipped(ctx, tx, skipped, skippedIdx, onlyProvider, &out); err != nil {
			return recordResult{}, err
		}
	}
	return out, nil
}

// otherParties takes out of b the events naming other parties than their
// lease's recorded usage (pass 2 held the batch's events of a lease to its
// first's). A repeat of a recorded event is counted as one, a conflicting
// repeat of a recorded id rejected as one, any other rejected naming the
// lease's parties (to a meter bound to a provider, only its own:
// domain.RecordedLeaseReason). (A lease's usage naming a second renter was charged
// whole to the first: pricing rates a lease as one.)
func otherParties(ctx context.Context, tx Tx, b batch, leaseIDs []string, onlyProvider string, out *recordResult) (batch, error) {
	recorded, err := tx.LeaseParties(ctx, leaseIDs)
	if err != nil {
		return b, err
	}
	reason := make([]string, len(b.recs)) // "" : kept
	odd := 0
	for i, r := range b.recs {
		p := domain.LeaseParties{ProviderID: r.ProviderID, RenterID: r.RenterID}
		if ps := recorded[r.LeaseID]; len(ps) > 0 && !slices.Contains(ps, p) {
			reason[i], odd = domain.RecordedLeaseReason(r.LeaseID, ps, onlyProvider), odd+1
		}
	}
	if odd == 0 {
		return b, nil
	}
	var ids []string
	for i, r := range b.recs {
		if reason[i] != "" {
			ids = append(ids, r.ID)
		}
	}
	exist, err := tx.Existing(ctx, ids)
	if err != nil {
		return b, err
	}
	kept := batch{recs: make([]domain.Recorded, 0, len(b.recs)-odd), recIdx: make([]int, 0, len(b.recs)-odd), byLease: b.byLease, judged: b.judged}
	for i, r := range b.recs {
		if reason[i] == "" {
			kept.recs, kept.recIdx = append(kept.recs, r), append(kept.recIdx, b.recIdx[i])
			continue
		}
		switch stored, ok := exist[r.ID]; {
		case ok && len(stored.Differs(r.Event)) == 0:
			out.dups++
		case ok:
			out.rejected = append(out.rejected, Rejection{Index: b.recIdx[i], ID: r.ID, Reason: domain.RecordedConflictReason(stored, r.Event, onlyProvider)})
		default:
			out.rejected = append(out.rejected, Rejection{Index: b.recIdx[i], ID: r.ID, Reason: reason[i]})
		}
	}
	return kept, nil
}

// explainSkipped sorts the events the insert skipped into duplicates,
// conflicting repeats of a recorded id, and overlaps with recorded time.
func explainSkipped(ctx context.Context, tx Tx, skipped []domain.Event, skippedIdx []int, onlyProvider string, out *recordResult) error {
	sids := make([]string, len(skipped))
	for i, e := range skipped {
		sids[i] = e.ID
	}
	exist, err := tx.Existing(ctx, sids)
	if err != nil {
		return err
	}
	var overlapping []domain.Event
	var overlappingIdx []int
	for i, e := range skipped {
		if stored, ok := exist[e.ID]; ok {
			if diff := stored.Differs(e); len(diff) > 0 {
				out.rejected = append(out.rejected, Rejection{Index: skippedIdx[i], ID: e.ID, Reason: domain.RecordedConflictReason(stored, e, onlyProvider)})
				continue
			}
			out.dups++
			continue
		}
		overlapping = append(overlapping, e)
		overlappingIdx = append(overlappingIdx, skippedIdx[i])
	}
	if len(overlapping) == 0 {
		return nil
	}
	with, err := tx.Overlapping(ctx, overlapping)
	if err != nil {
		return err
	}
	for i, e := range overlapping {
		reason := fmt.Sprintf("overlaps %s on lease %s", with[e.ID], e.LeaseID)
		if with[e.ID] == "" { // cannot happen under LockLeases; say so rather than guess
			reason = fmt.Sprintf("not recorded: conflicting write on lease %s; retry", e.LeaseID)
		}
		out.rejected = append(out.rejected, Rejection{Index: overlappingIdx[i], ID: e.ID, Reason: reason})
	}
	return nil
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
