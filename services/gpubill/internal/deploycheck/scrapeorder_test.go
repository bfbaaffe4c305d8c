package deploycheck

import (
	"os"
	"path/filepath"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/gpubill/gpubill/pkg/obs"
	"github.com/gpubill/gpubill/services/ledger"
	"github.com/gpubill/gpubill/services/payout"
	"github.com/gpubill/gpubill/services/pricing"
	"github.com/gpubill/gpubill/services/settlement"
	"github.com/gpubill/gpubill/services/tax"
)

// TestPagedGaugesReadFirst fails when a list of scrape queries reads a
// metric a page reads after one no page reads. A source's queries run in
// order within one bound (obs.SQLCollector): those past it fail, their
// series vanish from the scrape, and a page on them cannot fire.
// Settlement's closing_stalled and open_past_close ran after its per-cycle
// figures, which at 2 × 100 000 providers took 0.9–4.7 s.
func TestPagedGaugesReadFirst(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(deployDir, "prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert  string            `yaml:"alert"`
				Expr   string            `yaml:"expr"`
				Labels map[string]string `yaml:"labels"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	paged := map[string]string{} // metric family → a page that reads it
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Labels["severity"] != "page" {
				continue
			}
			for _, s := range selectors(r.Expr) {
				paged[familyOf(s.metric)] = r.Alert
			}
		}
	}
	if len(paged) == 0 {
		t.Fatal("no page reads a gpubill_ metric: alerts.yml not read as written")
	}
	for source, ms := range map[string][]obs.SQLMetric{
		"pipeline": obs.PipelineMetrics("ledger"), "ledger": ledger.Metrics(), "payout": payout.Metrics(),
		"pricing": pricing.Metrics(), "settlement": settlement.Metrics(), "tax": tax.Metrics(),
	} {
		unpaged := ""
		for _, m := range ms {
			alert, ok := paged[m.Name]
			if ok && unpaged != "" {
				t.Errorf("%s reads %s (%s pages on it) after %s, which no page reads", source, m.Name, alert, unpaged)
			}
			if !ok && unpaged == "" {
				unpaged = m.Name
			}
		}
	}
}
