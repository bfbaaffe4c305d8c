package ports

import (
	"testing"

	"github.com/gpubill/gpubill/services/metering/internal/app"
)

// What a NATS message's rejections call for, by the reasons ingest writes:
// a fix makes an unknown model or party, or an end ahead of the clock,
// valid (dead letter, to replay); a conflicting write passes (delivered
// again); the rest no fix or retry changes (counted and logged).
func TestRejectionKind(t *testing.T) {
	for _, tt := range []struct {
		reasons []string
		want    int
	}{
		{[]string{`unknown gpu_model "H200"`}, rejectionFixable},
		{[]string{`unknown provider "p-9"`}, rejectionFixable},
		{[]string{`unknown renter "r-9"`}, rejectionFixable},
		{[]string{"end_time more than 5 min in the future"}, rejectionFixable},
		{[]string{"overlaps e-1 on lease l-1", "not recorded: conflicting write on lease l-2; retry"}, rejectionPasses},
		{[]string{"overlaps e-1 on lease l-1"}, rejectionFinal},
		{[]string{"older than the 35-day late-arrival limit"}, rejectionFinal},
		{[]string{"end_time before start_time", "workload holds a control character"}, rejectionFinal},
		{[]string{"overlaps e-1 on lease l-1", `unknown renter "r-9"`}, rejectionFixable},
	} {
		var rej []app.Rejection
		for _, r := range tt.reasons {
			rej = append(rej, app.Rejection{ID: "e", Reason: r})
		}
		if got := rejectionKind(rej); got != tt.want {
			t.Errorf("rejectionKind(%q) = %d, want %d", tt.reasons, got, tt.want)
		}
	}
}
