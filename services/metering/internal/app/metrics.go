package app

import (
	"context"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/gpubill/gpubill/services/metering/internal/domain"
)

var (
	eventsIngested = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "gpubill_usage_events_ingested_total",
		Help: "Usage events answered by ingest after commit: accepted (recorded) or duplicate (recorded before, same body).",
	}, []string{"result"})
	eventsRejected = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "gpubill_usage_events_rejected_total",
		Help: "Usage events refused by ingest, by reason class (the answer carries the full reason).",
	}, []string{"reason"})
	ingestRejudged = promauto.NewCounter(prometheus.CounterOpts{
		Name: "gpubill_usage_ingest_rejudged_total",
		Help: "Ingest rounds rolled back and judged again: an event of the batch was judged against another that recorded usage then rejected.",
	})
)

// rejectReasons classify a rejection's text into a bounded label, by the
// start of the reasons domain.Validate and ingest write; the first match wins.
var rejectReasons = []struct{ prefix, class string }{
	{"event does not decode: ", "malformed_event"},
	{"missing ", "missing_field"},
	{"id longer than ", "too_long"},
	{"longer than 24h", "duration_too_long"},
	{"unknown gpu_model ", "unknown_gpu_model"},
	{"unknown provider ", "unknown_party"},
	{"unknown renter ", "unknown_party"},
	{"renter \"", "renter_closed"}, // domain.Renter.RefusesUsage: "renter \"r-1\" closed at …"
	{"gpu_count ", "gpu_count"},
	{"malformed ", "malformed_time"},
	{"end_time more than", "in_future"},
	{"end_time ", "bad_interval"},
	{"older than the ", "too_late"},
	{"overlaps ", "overlap"},
	{"not recorded: conflicting write", "conflict_retry"},
	{"id ", "id_conflict"},      // "id X was recorded with a different body …"
	{"lease ", "lease_parties"}, // "lease L is recorded for provider P and renter R", or "… for another provider"
}

// rejectReasonClass is the label of one rejection's reason.
func rejectReasonClass(reason string) string {
	if strings.HasSuffix(reason, " holds a control character") || strings.HasSuffix(reason, " is not valid UTF-8") ||
		strings.Contains(reason, " holds an invisible character ") {
		return "bad_text" // "<field> holds …", which may be "id"
	}
	for _, r := range rejectReasons {
		if strings.HasPrefix(reason, r.prefix) {
			return r.class
		}
	}
	switch {
	case strings.Contains(reason, " longer than "):
		return "too_long" // "<field> longer than N characters"
	case strings.HasPrefix(reason, "provider_id ") || strings.HasPrefix(reason, "renter_id "):
		return "invalid_id"
	}
	return "other"
}

// RejectionClass is the reason class of a rejection (the label of
// gpubill_usage_events_rejected_total).
func RejectionClass(reason string) string { return rejectReasonClass(reason) }

// Ingest is ingest counted: what it answers, once committed.
func (a *App) Ingest(ctx context.Context, in []domain.EventInput, opt IngestOptions) (IngestResult, error) {
	res, err := a.ingest(ctx, in, opt)
	if err != nil {
		return res, err
	}
	eventsIngested.WithLabelValues("accepted").Add(float64(res.Accepted))
	eventsIngested.WithLabelValues("duplicate").Add(float64(res.Duplicates))
	for _, r := range res.Rejected {
		eventsRejected.WithLabelValues(rejectReasonClass(r.Reason)).Inc()
	}
	return res, nil
}

// Every series exists from the start (at 0), so rate() sees the first event.
func init() {
	eventsIngested.WithLabelValues("accepted")
	eventsIngested.WithLabelValues("duplicate")
	for _, r := range rejectReasons {
		eventsRejected.WithLabelValues(r.class)
	}
	for _, class := range []string{"too_long", "invalid_id", "bad_text", "other"} {
		eventsRejected.WithLabelValues(class)
	}
}
