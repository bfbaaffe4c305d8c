package deploycheck

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// labelSelector is a Kubernetes label selector as rendered.
type labelSelector struct {
	MatchLabels      map[string]string `yaml:"matchLabels"`
	MatchExpressions []struct {
		Key      string   `yaml:"key"`
		Operator string   `yaml:"operator"`
		Values   []string `yaml:"values"`
	} `yaml:"matchExpressions"`
}

// matches says whether the selector selects a pod with labels; operators it
// does not know select nothing, so a test reading them fails.
func (s *labelSelector) matches(labels map[string]string) bool {
	if s == nil {
		return false
	}
	for k, v := range s.MatchLabels {
		if labels[k] != v {
			return false
		}
	}
	for _, e := range s.MatchExpressions {
		v, ok := labels[e.Key]
		switch e.Operator {
		case "In":
			if !ok || !slices.Contains(e.Values, v) {
				return false
			}
		case "NotIn":
			if ok && slices.Contains(e.Values, v) {
				return false
			}
		case "Exists":
			if !ok {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// podLabels are the pod template labels of the rendered Deployments, by name.
func podLabels(t *testing.T, objects map[string]k8sObject) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	for key, o := range objects {
		name, ok := strings.CutPrefix(key, "Deployment/")
		if !ok {
			continue
		}
		var spec struct {
			Template struct {
				Metadata struct {
					Labels map[string]string `yaml:"labels"`
				} `yaml:"metadata"`
			} `yaml:"template"`
		}
		if err := o.Spec.Decode(&spec); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		out[name] = spec.Template.Metadata.Labels
	}
	return out
}

// TestNetworkPolicyAdmitsOnlyGatewayPrometheusAndPeers: off by default; with
// networkPolicy.enabled every service pod is selected by a policy whose
// ingress is REST :8080 from the gateway's pods and the Prometheus peers
// named in values, and gRPC :9090 from the six services' pods (not the
// gateway's), nothing else: no rule without ports or without peers (either
// admits everything), no peer in another namespace but the Prometheus
// ones. Without it every pod in the cluster reached each service's REST and
// gRPC ports directly, past the gateway.
func TestNetworkPolicyAdmitsOnlyGatewayPrometheusAndPeers(t *testing.T) {
	chart := offlineChart(t)
	for key := range renderChart(t, chart) {
		if strings.HasPrefix(key, "NetworkPolicy/") {
			t.Errorf("%s rendered by default, want networkPolicy.enabled off", key)
		}
	}
	objects := renderChart(t, chart, "--set", "networkPolicy.enabled=true")
	labels := podLabels(t, objects)
	type peer struct {
		PodSelector       *labelSelector `yaml:"podSelector"`
		NamespaceSelector *labelSelector `yaml:"namespaceSelector"`
		IPBlock           any            `yaml:"ipBlock"`
	}
	type policy struct {
		PodSelector labelSelector `yaml:"podSelector"`
		PolicyTypes []string      `yaml:"policyTypes"`
		Ingress     []struct {
			From  []peer `yaml:"from"`
			Ports []struct {
				Port any `yaml:"port"`
			} `yaml:"ports"`
		} `yaml:"ingress"`
	}
	var policies []policy
	for key, o := range objects {
		if o.Kind != "NetworkPolicy" {
			continue
		}
		var p policy
		if err := o.Spec.Decode(&p); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		policies = append(policies, p)
	}
	if len(policies) == 0 {
		t.Fatal("no NetworkPolicy rendered with networkPolicy.enabled=true")
	}
	b, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		NetworkPolicy struct {
			MetricsFrom []peer `yaml:"metricsFrom"`
		} `yaml:"networkPolicy"`
	}
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	if len(values.NetworkPolicy.MetricsFrom) == 0 {
		t.Fatal("values.yaml networkPolicy.metricsFrom is empty: Prometheus could not scrape with the policies on")
	}
	for _, name := range processes {
		admitted := map[string][]peer{} // port: peers
		var selected bool
		for _, p := range policies {
			if !p.PodSelector.matches(labels[name]) {
				continue
			}
			selected = true
			if !slices.Contains(p.PolicyTypes, "Ingress") {
				t.Errorf("a policy selecting %s has policyTypes %v, want Ingress", name, p.PolicyTypes)
			}
			for _, r := range p.Ingress {
				if len(r.From) == 0 || len(r.Ports) == 0 {
					t.Errorf("a policy selecting %s has an ingress rule %+v without peers or ports: it admits everything", name, r)
				}
				for _, port := range r.Ports {
					k := strings.TrimSpace(strings.Trim(yamlString(port.Port), `"`))
					admitted[k] = append(admitted[k], r.From...)
				}
			}
		}
		if !selected {
			t.Errorf("Deployment %s: no NetworkPolicy selects its pods", name)
			continue
		}
		if got := slices.Sorted(maps.Keys(admitted)); !slices.Equal(got, []string{"8080", "9090"}) {
			t.Errorf("Deployment %s: ingress ports %v, want 8080 and 9090", name, got)
		}
		var metricsPeers int
		for _, pr := range admitted["8080"] {
			switch {
			case pr.NamespaceSelector == nil && pr.IPBlock == nil && pr.PodSelector.matches(labels["gateway"]):
				for _, other := range processes {
					if pr.PodSelector.matches(labels[other]) {
						t.Errorf("Deployment %s: REST peer %+v admits service %s, want the gateway alone", name, pr.PodSelector, other)
					}
				}
			case slices.ContainsFunc(values.NetworkPolicy.MetricsFrom, func(m peer) bool { return yamlString(m) == yamlString(pr) }):
				metricsPeers++
			default:
				t.Errorf("Deployment %s: REST :8080 admits %s, neither the gateway nor a networkPolicy.metricsFrom peer", name, yamlString(pr))
			}
		}
		if metricsPeers != len(values.NetworkPolicy.MetricsFrom) {
			t.Errorf("Deployment %s: %d of networkPolicy.metricsFrom's %d peers admitted to :8080", name, metricsPeers, len(values.NetworkPolicy.MetricsFrom))
		}
		for _, pr := range admitted["9090"] {
			if pr.NamespaceSelector != nil || pr.IPBlock != nil || pr.PodSelector.matches(labels["gateway"]) {
				t.Errorf("Deployment %s: gRPC :9090 admits %s, want the services' pods alone", name, yamlString(pr))
			}
		}
		for _, other := range processes {
			if !slices.ContainsFunc(admitted["9090"], func(pr peer) bool { return pr.PodSelector.matches(labels[other]) }) {
				t.Errorf("Deployment %s: gRPC :9090 does not admit %s, which calls it", name, other)
			}
		}
	}
}
