package deploycheck

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

const chartDir = deployDir + "/helm/gpubill"

// helmBinary is tools/helm/bin/helm (`make helm-tools`), or $HELM.
func helmBinary(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	h, err := filepath.Abs(filepath.Join(deployDir, "..", "tools", "helm", "bin", "helm"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(h); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("helm not built (%v): .ci/run runs make helm-check first", err)
		}
		t.Skipf("helm not built (%v): make helm-tools, or make helm-check", err)
	}
	return h
}

func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helmBinary(t), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		err = errors.New(err.Error() + ": " + errb.String())
	}
	return out.String(), err
}

// offlineChart copies the chart (its nginx.conf link resolved) without its
// dependencies: the official NATS and Temporal charts are off by default
// and cannot be fetched here, and helm template refuses a chart whose
// dependencies are not in charts/ even when disabled.
func offlineChart(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "gpubill")
	err := filepath.WalkDir(chartDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(chartDir, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p) // follows the link
		if err != nil {
			return err
		}
		if rel == "Chart.yaml" {
			var meta map[string]any
			if err := yaml.Unmarshal(b, &meta); err != nil {
				return err
			}
			deps, _ := meta["dependencies"].([]any)
			var names []string
			for _, d := range deps {
				m, _ := d.(map[string]any)
				names = append(names, m["name"].(string))
				if _, ok := m["condition"]; !ok {
					t.Errorf("Chart.yaml dependency %v has no condition: it cannot be off", m["name"])
				}
			}
			slices.Sort(names)
			if !slices.Equal(names, []string{"nats", "temporal"}) {
				t.Errorf("Chart.yaml dependencies %v, want the official nats and temporal charts", names)
			}
			delete(meta, "dependencies")
			if b, err = yaml.Marshal(meta); err != nil {
				return err
			}
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

type k8sObject struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec yaml.Node `yaml:"spec"`
	Data map[string]string
}

type podSpec struct {
	Containers []struct {
		Name  string `yaml:"name"`
		Image string `yaml:"image"`
		Env   []struct {
			Name      string `yaml:"name"`
			Value     *string
			ValueFrom *struct {
				SecretKeyRef *struct{ Name, Key string } `yaml:"secretKeyRef"`
			} `yaml:"valueFrom"`
		} `yaml:"env"`
		ReadinessProbe *struct {
			HTTPGet *struct{ Path string } `yaml:"httpGet"`
		} `yaml:"readinessProbe"`
		LivenessProbe *struct {
			HTTPGet *struct{ Path string } `yaml:"httpGet"`
		} `yaml:"livenessProbe"`
		Resources struct {
			Requests map[string]string `yaml:"requests"`
			Limits   map[string]string `yaml:"limits"`
		} `yaml:"resources"`
	} `yaml:"containers"`
}

// TestHelmChartRendersEveryService: `helm lint` passes; `helm template`
// renders, for each of the six services and the gateway, a Deployment
// (readiness on /readyz, liveness on /healthz — the gateway's nginx answers
// /healthz itself — resources), a PodDisruptionBudget and a Service named as
// nginx.conf's upstream; GPUBILL_AUTH_SECRET comes from the Secret named in
// values and never has a value of its own, and rendering without one
// fails; DATABASE_URL comes from the CloudNativePG Cluster's app Secret;
// streams get 3 replicas; the gateway runs deploy/nginx.conf as it is.
func TestHelmChartRendersEveryService(t *testing.T) {
	if out, err := helm(t, "lint", chartDir, "--set", "authSecret.existingSecret=gpubill-auth"); err != nil {
		t.Fatalf("helm lint: %v\n%s", err, out)
	}
	chart := offlineChart(t)
	if _, err := helm(t, "template", "gpubill", chart); err == nil || !strings.Contains(err.Error(), "authSecret.existingSecret is required") {
		t.Errorf("helm template without authSecret.existingSecret: %v, want it refused", err)
	}
	out, err := helm(t, "template", "gpubill", chart, "--set", "authSecret.existingSecret=gpubill-auth")
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	objects := map[string]k8sObject{} // kind/name
	dec := yaml.NewDecoder(strings.NewReader(out))
	for {
		var o k8sObject
		if err := dec.Decode(&o); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("rendered YAML: %v", err)
		}
		if o.Kind != "" {
			objects[o.Kind+"/"+o.Metadata.Name] = o
		}
	}
	nginx, err := os.ReadFile(filepath.Join(deployDir, "nginx.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if cm, ok := objects["ConfigMap/gateway-nginx"]; !ok || cm.Data["nginx.conf"] != string(nginx) {
		t.Errorf("the gateway's ConfigMap is not deploy/nginx.conf as it is")
	}
	g := loadGateway(t, filepath.Join(deployDir, "nginx.conf"))
	for _, name := range append(slices.Clone(processes), "gateway") {
		for _, kind := range []string{"Deployment", "PodDisruptionBudget", "Service"} {
			if _, ok := objects[kind+"/"+name]; !ok {
				t.Errorf("no %s %s", kind, name)
			}
		}
		if name != "gateway" && len(g.upstreams[name]) == 0 {
			t.Errorf("Service %s is no upstream of nginx.conf", name)
		}
		d, ok := objects["Deployment/"+name]
		if !ok {
			continue
		}
		var spec struct {
			Replicas int `yaml:"replicas"`
			Template struct {
				Spec podSpec `yaml:"spec"`
			} `yaml:"template"`
		}
		if err := d.Spec.Decode(&spec); err != nil || len(spec.Template.Spec.Containers) != 1 {
			t.Errorf("Deployment %s: %v %+v", name, err, spec)
			continue
		}
		c := spec.Template.Spec.Containers[0]
		ready, live := "/readyz", "/healthz"
		if name == "gateway" {
			ready = "/healthz"
		}
		if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != ready {
			t.Errorf("Deployment %s: readiness probe %+v, want GET %s", name, c.ReadinessProbe, ready)
		}
		if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != live {
			t.Errorf("Deployment %s: liveness probe %+v, want GET %s", name, c.LivenessProbe, live)
		}
		if c.Resources.Requests["cpu"] == "" || c.Resources.Requests["memory"] == "" || c.Resources.Limits["memory"] == "" {
			t.Errorf("Deployment %s: resources %+v, want cpu and memory requests and a memory limit", name, c.Resources)
		}
		if name == "gateway" {
			continue
		}
		if spec.Replicas < 2 {
			t.Errorf("Deployment %s: %d replica(s): a PodDisruptionBudget of maxUnavailable 1 would leave none", name, spec.Replicas)
		}
		if !strings.HasSuffix(c.Image, "/"+name+":0.1.0") {
			t.Errorf("Deployment %s: image %s, want <repository>/%s:<tag>", name, c.Image, name)
		}
		env := map[string]string{}
		for _, e := range c.Env {
			switch {
			case e.Value != nil:
				env[e.Name] = *e.Value
			case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
				env[e.Name] = "secret:" + e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
			}
		}
		for _, other := range processes {
			if k := "GPUBILL_" + strings.ToUpper(other) + "_GRPC"; env[k] != other+":9090" {
				t.Errorf("Deployment %s: %s = %q, want %s:9090", name, k, env[k], other)
			}
		}
		for k, want := range map[string]string{
			"GPUBILL_AUTH_SECRET": "secret:gpubill-auth/secret", "DATABASE_URL": "secret:gpubill-pg-app/uri",
			"GPUBILL_STREAM_REPLICAS": "3", "GPUBILL_API_DOCS": "all", "GPUBILL_HTTP_ADDR": "0.0.0.0:8080",
			"NATS_URL": "nats://nats:4222", "TEMPORAL_ADDRESS": "temporal-frontend:7233",
		} {
			if env[k] != want {
				t.Errorf("Deployment %s: %s = %q, want %q", name, k, env[k], want)
			}
		}
	}
	if _, ok := objects["Cluster/gpubill-pg"]; !ok {
		t.Errorf("no CloudNativePG Cluster gpubill-pg")
	}
}
