package deploycheck

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestNATSURLFromSecret: with nats.existingSecret, every service's NATS_URL
// comes from that Secret and the URL in natsUrl (its user:password) is
// nowhere in the rendered manifests. A plain NATS_URL cannot be overridden
// by an envFrom Secret (an explicit env wins), so credentials had to sit in
// values and in six Deployments in plain text.
func TestNATSURLFromSecret(t *testing.T) {
	chart := offlineChart(t)
	const creds = "nats://gpubill:s3cret-pass@nats:4222"
	out, err := helm(t, append([]string{"template", "gpubill", chart, "--set", "natsUrl=" + creds,
		"--set", "nats.existingSecret=gpubill-nats"}, secretValues...)...)
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	if strings.Contains(out, "s3cret-pass") {
		t.Errorf("natsUrl's password is in the rendered manifests with nats.existingSecret set")
	}
	pods := workloads(t, renderChart(t, chart, "--set", "natsUrl="+creds, "--set", "nats.existingSecret=gpubill-nats"))
	for _, name := range processes {
		p, ok := pods["Deployment/"+name]
		if !ok || len(p.Containers) != 1 {
			t.Fatalf("Deployment %s: %+v", name, p)
		}
		var found int
		for _, e := range p.Containers[0].Env {
			if e.Name != "NATS_URL" {
				continue
			}
			found++
			if e.Value != nil || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil ||
				*e.ValueFrom.SecretKeyRef != (struct{ Name, Key string }{"gpubill-nats", "url"}) {
				t.Errorf("Deployment %s: NATS_URL %s, want it from the Secret gpubill-nats key url", name, yamlString(e))
			}
		}
		if found != 1 {
			t.Errorf("Deployment %s: %d NATS_URL entries, want 1", name, found)
		}
	}
}

func yamlString(v any) string {
	b, err := yaml.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return strings.TrimSpace(string(b))
}
