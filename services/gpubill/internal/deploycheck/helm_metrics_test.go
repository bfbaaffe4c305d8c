package deploycheck

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestPrometheusOperatorObjects: off by default; with metrics.podMonitor and
// metrics.rules enabled the chart renders a PodMonitor scraping /metrics on
// every service's http port (not the gateway's nginx) and a PrometheusRule
// whose groups are deploy/prometheus/alerts.yml's, rule for rule (name,
// expression, for, labels): kube-prometheus-stack ignores prometheus.io/*
// annotations, and alerts.yml was not in the chart, so a cluster run by the
// Prometheus Operator scraped nothing and paged for nothing.
func TestPrometheusOperatorObjects(t *testing.T) {
	chart := offlineChart(t)
	for key := range renderChart(t, chart) {
		if strings.HasPrefix(key, "PodMonitor/") || strings.HasPrefix(key, "PrometheusRule/") {
			t.Errorf("%s rendered by default, want metrics.podMonitor and metrics.rules off", key)
		}
	}
	objects := renderChart(t, chart, "--set", "metrics.podMonitor.enabled=true", "--set", "metrics.rules.enabled=true")
	labels := podLabels(t, objects)

	type ruleGroups struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Record      string            `yaml:"record"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	b, err := os.ReadFile(filepath.Join(deployDir, "prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var want ruleGroups
	if err := yaml.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	var rules []ruleGroups
	var monitors []k8sObject
	for _, o := range objects {
		switch o.Kind {
		case "PrometheusRule":
			var g ruleGroups
			if err := o.Spec.Decode(&g); err != nil {
				t.Fatalf("PrometheusRule/%s: %v", o.Metadata.Name, err)
			}
			rules = append(rules, g)
		case "PodMonitor":
			monitors = append(monitors, o)
		}
	}
	if len(rules) != 1 {
		t.Fatalf("%d PrometheusRules rendered, want 1", len(rules))
	}
	got := rules[0]
	var wantNames, gotNames []string
	for _, g := range want.Groups {
		for _, r := range g.Rules {
			wantNames = append(wantNames, g.Name+"/"+r.Alert+r.Record)
		}
	}
	for _, g := range got.Groups {
		for _, r := range g.Rules {
			gotNames = append(gotNames, g.Name+"/"+r.Alert+r.Record)
		}
	}
	if len(wantNames) < 10 || !slices.Equal(gotNames, wantNames) {
		t.Errorf("PrometheusRule rules %v, want alerts.yml's %v", gotNames, wantNames)
	} else if yamlString(got) != yamlString(want) {
		t.Errorf("PrometheusRule groups differ from alerts.yml's (expressions, durations, labels or annotations)")
	}

	if len(monitors) != 1 {
		t.Fatalf("%d PodMonitors rendered, want 1", len(monitors))
	}
	var pm struct {
		Selector            labelSelector `yaml:"selector"`
		PodMetricsEndpoints []struct {
			Port string `yaml:"port"`
			Path string `yaml:"path"`
		} `yaml:"podMetricsEndpoints"`
	}
	if err := monitors[0].Spec.Decode(&pm); err != nil {
		t.Fatal(err)
	}
	if len(pm.PodMetricsEndpoints) != 1 || pm.PodMetricsEndpoints[0].Port != "http" || pm.PodMetricsEndpoints[0].Path != "/metrics" {
		t.Errorf("PodMonitor endpoints %+v, want port http path /metrics", pm.PodMetricsEndpoints)
	}
	for _, name := range processes {
		if !pm.Selector.matches(labels[name]) {
			t.Errorf("PodMonitor selector %+v does not select %s's pods %v", pm.Selector, name, labels[name])
		}
	}
	if pm.Selector.matches(labels["gateway"]) {
		t.Errorf("PodMonitor selects the gateway's pods: nginx serves no /metrics")
	}
}
