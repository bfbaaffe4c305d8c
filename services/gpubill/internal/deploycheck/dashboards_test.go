package deploycheck

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// gridColumns is the width of a Grafana dashboard's grid.
const gridColumns = 24

// dashboard is the part of a Grafana dashboard the checks read.
type dashboard struct {
	file          string
	UID           string           `json:"uid"`
	SchemaVersion int              `json:"schemaVersion"`
	Panels        []dashboardPanel `json:"panels"`
}

func readDashboards(t *testing.T) []dashboard {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(deployDir, "grafana", "dashboards", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("dashboards %v (%v)", files, err)
	}
	var out []dashboard
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		d := dashboard{file: filepath.Base(f)}
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, d)
	}
	return out
}

// allPanels lists ps and the panels of their rows.
func allPanels(ps []dashboardPanel) []dashboardPanel {
	var out []dashboardPanel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// TestAlertsHaveDashboardPanels fails when a series an alert rule reads is
// on no dashboard panel (an operator paged by it finds nothing to look
// at), or when a panel showing an alert's metric turns red at another
// value than the alert fires at.
func TestAlertsHaveDashboardPanels(t *testing.T) {
	t.Parallel()
	alerts := alertExprs(t, filepath.Join(deployDir, "prometheus", "alerts.yml"))
	dashboards := readDashboards(t)

	type shown struct {
		where string
		sel   selector
	}
	var panelSelectors []shown
	for _, d := range dashboards {
		for _, p := range allPanels(d.Panels) {
			for _, tg := range p.Targets {
				for _, s := range selectors(tg.Expr) {
					panelSelectors = append(panelSelectors, shown{d.file + ": " + p.Title, s})
				}
			}
		}
	}
	names := make([]string, 0, len(alerts))
	for n := range alerts {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, alert := range names {
		seen := map[string]bool{}
		for _, want := range selectors(alerts[alert]) {
			if seen[want.String()] {
				continue
			}
			seen[want.String()] = true
			found := false
			for _, got := range panelSelectors {
				if covers(got.sel, want) {
					found = true
					break
				}
			}
			if !found {
				t.Errorf("alert %s reads %s, which no dashboard panel shows", alert, want)
			}
		}
	}

	// The value each alert fires at, by the metrics it reads.
	type firing struct {
		alert string
		op    string // > or <
		at    float64
	}
	firesAt := map[string][]firing{}
	for _, alert := range names {
		op, at, ok := alertThreshold(alerts[alert])
		if !ok {
			continue
		}
		for _, s := range selectors(alerts[alert]) {
			m := familyOf(s.metric)
			firesAt[m] = append(firesAt[m], firing{alert, op, at})
		}
	}
	for _, d := range dashboards {
		for _, p := range allPanels(d.Panels) {
			steps := p.FieldConfig.Defaults.Thresholds.Steps
			if len(steps) < 2 {
				continue
			}
			var candidates []firing
			for _, tg := range p.Targets {
				for _, s := range selectors(tg.Expr) {
					candidates = append(candidates, firesAt[familyOf(s.metric)]...)
				}
			}
			matched := len(candidates) == 0
			for _, f := range candidates {
				matched = matched || turnsRedAt(steps, f.op, f.at)
			}
			if !matched {
				t.Errorf("%s: panel %q's thresholds %s do not turn red where its alerts fire: %+v", d.file, p.Title, stepsString(steps), candidates)
			}
		}
	}
}

// TestDashboardsLoad fails on what keeps Grafana from showing a
// provisioned dashboard as written: a schema version other than the
// others', a uid taken, a panel id repeated, panels overlapping or past
// the grid's edge, a data source not provisioned.
func TestDashboardsLoad(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(deployDir, "grafana", "provisioning", "datasources", "prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var provisioned struct {
		Datasources []struct {
			UID string `yaml:"uid"`
		} `yaml:"datasources"`
	}
	if err := yaml.Unmarshal(b, &provisioned); err != nil {
		t.Fatal(err)
	}
	sources := map[string]bool{}
	for _, ds := range provisioned.Datasources {
		sources[ds.UID] = true
	}

	dashboards := readDashboards(t)
	uids := map[string]string{}
	for _, d := range dashboards {
		if d.SchemaVersion != dashboards[0].SchemaVersion {
			t.Errorf("%s: schemaVersion %d, %s has %d", d.file, d.SchemaVersion, dashboards[0].file, dashboards[0].SchemaVersion)
		}
		if other, ok := uids[d.UID]; ok {
			t.Errorf("%s: uid %q is %s's too", d.file, d.UID, other)
		}
		uids[d.UID] = d.file
		ids := map[int]string{}
		for _, p := range allPanels(d.Panels) {
			if other, ok := ids[p.ID]; ok || p.ID <= 0 {
				t.Errorf("%s: panel %q has id %d (%q has it too)", d.file, p.Title, p.ID, other)
			}
			ids[p.ID] = p.Title
			if !sources[p.Datasource.UID] {
				t.Errorf("%s: panel %q: data source %q is not provisioned", d.file, p.Title, p.Datasource.UID)
			}
			for i, tg := range p.Targets {
				if tg.Datasource.UID != "" && !sources[tg.Datasource.UID] {
					t.Errorf("%s: panel %q query %d: data source %q is not provisioned", d.file, p.Title, i, tg.Datasource.UID)
				}
			}
		}
		for i, p := range d.Panels {
			g := p.GridPos
			if g.W <= 0 || g.H <= 0 || g.X < 0 || g.Y < 0 || g.X+g.W > gridColumns {
				t.Errorf("%s: panel %q gridPos %+v is outside the %d-column grid", d.file, p.Title, g, gridColumns)
			}
			for _, q := range d.Panels[:i] {
				o := q.GridPos
				if g.X < o.X+o.W && o.X < g.X+g.W && g.Y < o.Y+o.H && o.Y < g.Y+g.H {
					t.Errorf("%s: panel %q %+v overlaps %q %+v", d.file, p.Title, g, q.Title, o)
				}
			}
		}
	}
}

// selector is a metric with its label matchers, as a query names it.
type selector struct {
	metric   string
	matchers []labelMatcher
}

func (s selector) String() string {
	var ms []string
	for _, m := range s.matchers {
		ms = append(ms, m.label+m.op+strconv.Quote(m.value))
	}
	if len(ms) == 0 {
		return s.metric
	}
	return s.metric + "{" + strings.Join(ms, ", ") + "}"
}

type labelMatcher struct {
	label, op, value string
}

var (
	selectorRe = regexp.MustCompile(`\b(gpubill_[a-zA-Z0-9_]+)\s*(\{[^}]*\})?`)
	matcherRe  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"`)
)

// selectors lists the gpubill_ series selectors of a PromQL query,
// Grafana's variables read as matching all (their "All").
func selectors(expr string) []selector {
	var out []selector
	for _, m := range selectorRe.FindAllStringSubmatch(expr, -1) {
		s := selector{metric: m[1]}
		for _, lm := range matcherRe.FindAllStringSubmatch(m[2], -1) {
			s.matchers = append(s.matchers, labelMatcher{lm[1], lm[2], grafanaVar.ReplaceAllString(lm[3], ".*")})
		}
		out = append(out, s)
	}
	return out
}

// accepts reports whether m lets a series whose label is v through.
func (m labelMatcher) accepts(v string) bool {
	switch m.op {
	case "=":
		return v == m.value
	case "!=":
		return v != m.value
	}
	re, err := regexp.Compile("^(?:" + m.value + ")$")
	if err != nil {
		return false
	}
	return re.MatchString(v) == (m.op == "=~")
}

// values lists the label values m selects when it is an equality or an
// alternation of literals (what the alert rules use).
func (m labelMatcher) values() ([]string, bool) {
	switch m.op {
	case "=":
		return []string{m.value}, true
	case "=~":
		vs := strings.Split(m.value, "|")
		for _, v := range vs {
			if v == "" || regexp.QuoteMeta(v) != v {
				return nil, false
			}
		}
		return vs, true
	}
	return nil, false
}

// covers reports whether a panel's selector shows every series the
// alert's selects: the same metric, and each of the panel's matchers
// letting through what the alert's select on its label (everything, where
// the alert does not narrow the label).
func covers(panel, alert selector) bool {
	if familyOf(panel.metric) != familyOf(alert.metric) {
		return false
	}
	for _, pm := range panel.matchers {
		narrowed := false
		for _, am := range alert.matchers {
			if am.label != pm.label {
				continue
			}
			if am == pm {
				narrowed = true
				continue
			}
			vs, ok := am.values()
			if !ok {
				return false
			}
			for _, v := range vs {
				if !pm.accepts(v) {
					return false
				}
			}
			narrowed = true
		}
		if !narrowed && (pm.op != "=~" || pm.value != ".*") {
			return false
		}
	}
	return true
}

var thresholdRe = regexp.MustCompile(`([<>])\s*([0-9.]+(?:\s*\*\s*[0-9.]+)*)\s*$`)

// alertThreshold reads an alert expression ending in a comparison with a
// constant (a product of numbers, as 26 * 3600).
func alertThreshold(expr string) (op string, at float64, ok bool) {
	m := thresholdRe.FindStringSubmatch(strings.TrimSpace(expr))
	if m == nil {
		return "", 0, false
	}
	at = 1
	for _, f := range strings.Split(m[2], "*") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil {
			return "", 0, false
		}
		at *= v
	}
	return m[1], at, true
}

// turnsRedAt reports whether steps colour red where an alert "op at"
// fires: from at up (from 1 for a count above 0), or below at.
func turnsRedAt(steps []thresholdStep, op string, at float64) bool {
	if op == "<" {
		return steps[0].Color == "red" && steps[1].Value != nil && *steps[1].Value == at
	}
	want := at
	if at == 0 {
		want = 1 // counts: red from the first one, not at 0
	}
	for _, s := range steps[1:] {
		if s.Color == "red" {
			return s.Value != nil && math.Abs(*s.Value-want) < 1e-9
		}
	}
	return false
}

func stepsString(steps []thresholdStep) string {
	var out []string
	for _, s := range steps {
		v := "base"
		if s.Value != nil {
			v = strconv.FormatFloat(*s.Value, 'f', -1, 64)
		}
		out = append(out, fmt.Sprintf("%s from %s", s.Color, v))
	}
	return strings.Join(out, ", ")
}
