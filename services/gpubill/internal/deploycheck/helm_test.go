package deploycheck

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/gpubill/gpubill/pkg/svc"
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

// probe is what the tests read of a container's probe.
type probe struct {
	HTTPGet *struct {
		Path string
		Port string
	} `yaml:"httpGet"`
	PeriodSeconds    int `yaml:"periodSeconds"`
	FailureThreshold int `yaml:"failureThreshold"`
}

// budget is how long the kubelet lets the probe fail before it acts:
// failureThreshold × periodSeconds, with Kubernetes' defaults (3, 10 s).
func (p *probe) budget() time.Duration {
	period, failures := p.PeriodSeconds, p.FailureThreshold
	if period == 0 {
		period = 10
	}
	if failures == 0 {
		failures = 3
	}
	return time.Duration(failures*period) * time.Second
}

// securityContext is what the tests read of a pod's or a container's.
type securityContext struct {
	RunAsNonRoot *bool  `yaml:"runAsNonRoot"`
	RunAsUser    *int64 `yaml:"runAsUser"`
	FSGroup      *int64 `yaml:"fsGroup"`
}

type podSpec struct {
	SecurityContext *securityContext `yaml:"securityContext"`
	Volumes         []struct {
		Name   string `yaml:"name"`
		Secret *struct {
			SecretName string `yaml:"secretName"`
		} `yaml:"secret"`
		PersistentVolumeClaim *struct {
			ClaimName string `yaml:"claimName"`
		} `yaml:"persistentVolumeClaim"`
	} `yaml:"volumes"`
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
		EnvFrom []struct {
			SecretRef *struct{ Name string } `yaml:"secretRef"`
		} `yaml:"envFrom"`
		VolumeMounts []struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
		} `yaml:"volumeMounts"`
		ReadinessProbe  *probe           `yaml:"readinessProbe"`
		LivenessProbe   *probe           `yaml:"livenessProbe"`
		StartupProbe    *probe           `yaml:"startupProbe"`
		SecurityContext *securityContext `yaml:"securityContext"`
		Resources       struct {
			Requests map[string]string `yaml:"requests"`
			Limits   map[string]string `yaml:"limits"`
		} `yaml:"resources"`
	} `yaml:"containers"`
}

// secretValues name the Secrets the chart requires.
var secretValues = []string{"--set", "authSecret.existingSecret=gpubill-auth", "--set", "webhookKey.existingSecret=gpubill-webhook"}

// renderChart renders chart (offlineChart's) with the Secrets it requires
// set and more values, its objects by kind/name.
func renderChart(t *testing.T, chart string, more ...string) map[string]k8sObject {
	t.Helper()
	out, err := helm(t, append([]string{"template", "gpubill", chart}, append(secretValues, more...)...)...)
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
	return objects
}

// workloads are the rendered Deployments and StatefulSets, their pod specs
// by kind/name.
func workloads(t *testing.T, objects map[string]k8sObject) map[string]podSpec {
	t.Helper()
	pods := map[string]podSpec{}
	for key, o := range objects {
		if o.Kind != "Deployment" && o.Kind != "StatefulSet" {
			continue
		}
		var spec struct {
			Template struct {
				Spec podSpec `yaml:"spec"`
			} `yaml:"template"`
		}
		if err := o.Spec.Decode(&spec); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		pods[key] = spec.Template.Spec
	}
	return pods
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
	if out, err := helm(t, append([]string{"lint", chartDir}, secretValues...)...); err != nil {
		t.Fatalf("helm lint: %v\n%s", err, out)
	}
	chart := offlineChart(t)
	if _, err := helm(t, "template", "gpubill", chart, "--set", "webhookKey.existingSecret=gpubill-webhook"); err == nil || !strings.Contains(err.Error(), "authSecret.existingSecret is required") {
		t.Errorf("helm template without authSecret.existingSecret: %v, want it refused", err)
	}
	if _, err := helm(t, "template", "gpubill", chart, "--set", "authSecret.existingSecret=gpubill-auth"); err == nil || !strings.Contains(err.Error(), "webhookKey.existingSecret is required") {
		t.Errorf("helm template without webhookKey.existingSecret: %v, want it refused", err)
	}
	objects := renderChart(t, chart)
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
		// The services call each other through headless Services: a
		// ClusterIP's one address pinned a caller to one replica.
		for _, other := range processes {
			if k, want := "GPUBILL_"+strings.ToUpper(other)+"_GRPC", "dns:///"+other+"-grpc:9090"; env[k] != want {
				t.Errorf("Deployment %s: %s = %q, want %s", name, k, env[k], want)
			}
		}
		var headless struct {
			ClusterIP string            `yaml:"clusterIP"`
			Selector  map[string]string `yaml:"selector"`
			Ports     []struct {
				Port       int    `yaml:"port"`
				TargetPort string `yaml:"targetPort"`
			} `yaml:"ports"`
		}
		if hs, ok := objects["Service/"+name+"-grpc"]; !ok {
			t.Errorf("no Service %s-grpc", name)
		} else if err := hs.Spec.Decode(&headless); err != nil || headless.ClusterIP != "None" || len(headless.Ports) != 1 ||
			headless.Ports[0].Port != 9090 || headless.Ports[0].TargetPort != "grpc" || headless.Selector["app.kubernetes.io/name"] != name {
			t.Errorf("Service %s-grpc: %v %+v, want headless, port 9090 to grpc, selecting %s", name, err, headless, name)
		}
		for _, e := range c.Env {
			if e.Value != nil && (strings.Contains(e.Name, "SECRET") || strings.Contains(e.Name, "KEY")) {
				t.Errorf("Deployment %s: %s has a value of its own, want it from a Secret", name, e.Name)
			}
		}
		// Payout alone refuses to start without its webhook key (one made in
		// the container was lost with it, and differed per replica).
		if wantKey := map[bool]string{true: "secret:gpubill-webhook/key"}[name == "payout"]; env["GPUBILL_WEBHOOK_KEY"] != wantKey {
			t.Errorf("Deployment %s: GPUBILL_WEBHOOK_KEY = %q, want %q", name, env["GPUBILL_WEBHOOK_KEY"], wantKey)
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

// TestImageAndChartRunAsANumericUser: the Dockerfile's last USER is a
// uid[:gid], and every rendered container that must run as non-root
// (runAsNonRoot, its own or its pod's) has a numeric runAsUser other than 0
// (its own or its pod's). The kubelet cannot tell whether a user named in
// the image (USER nonroot) is root, so without a number it refuses to start
// the container (CreateContainerConfigError): no service pod would run.
func TestImageAndChartRunAsANumericUser(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(deployDir, "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var user string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && strings.EqualFold(f[0], "USER") {
			user = f[1]
		}
	}
	if !regexp.MustCompile(`^[0-9]+(:[0-9]+)?$`).MatchString(user) {
		t.Errorf("Dockerfile: last USER %q, want a uid[:gid] (distroless nonroot is 65532:65532)", user)
	}

	pods := workloads(t, renderChart(t, offlineChart(t)))
	var nonRoot int
	for _, key := range slices.Sorted(maps.Keys(pods)) {
		pod := pods[key]
		for _, c := range pod.Containers {
			var mustBeNonRoot bool
			var uid *int64
			for _, sc := range []*securityContext{pod.SecurityContext, c.SecurityContext} { // the container's wins
				if sc == nil {
					continue
				}
				if sc.RunAsNonRoot != nil {
					mustBeNonRoot = *sc.RunAsNonRoot
				}
				if sc.RunAsUser != nil {
					uid = sc.RunAsUser
				}
			}
			if !mustBeNonRoot {
				continue
			}
			nonRoot++
			if uid == nil || *uid == 0 {
				t.Errorf("%s container %s: runAsNonRoot without a runAsUser other than 0 (the kubelet cannot check the image's user name)", key, c.Name)
			}
		}
	}
	if nonRoot < len(processes) {
		t.Errorf("%d containers run as non-root, want at least the %d services'", nonRoot, len(processes))
	}
}

// startupBudgetMin is how long a service may take to start (its
// migrations: many minutes on a large journal) before the kubelet kills it.
const startupBudgetMin = 30 * time.Minute

// TestServicesStartUpBeforeLivenessCounts: every rendered container with a
// liveness probe on /healthz — served only once start-up, the migrations,
// is over — has a startup probe on the same path and port giving it at
// least startupBudgetMin; liveness (a minute or so) would otherwise kill a
// slow migration, and its retry, forever. The gateway is left out: its
// nginx answers /healthz itself from its first second.
func TestServicesStartUpBeforeLivenessCounts(t *testing.T) {
	pods := workloads(t, renderChart(t, offlineChart(t)))
	var checked int
	for _, key := range slices.Sorted(maps.Keys(pods)) {
		if key == "Deployment/gateway" {
			continue
		}
		for _, c := range pods[key].Containers {
			live := c.LivenessProbe
			if live == nil {
				continue
			}
			checked++
			start := c.StartupProbe
			switch {
			case start == nil:
				t.Errorf("%s container %s: no startup probe: liveness kills a start-up still migrating after %s", key, c.Name, live.budget())
			case start.HTTPGet == nil || live.HTTPGet == nil || *start.HTTPGet != *live.HTTPGet:
				t.Errorf("%s container %s: startup probe %+v, want liveness's GET %+v", key, c.Name, start.HTTPGet, live.HTTPGet)
			case start.budget() < startupBudgetMin:
				t.Errorf("%s container %s: startup probe budget %s (failureThreshold × periodSeconds), want at least %s", key, c.Name, start.budget(), startupBudgetMin)
			}
		}
	}
	if checked < len(processes) {
		t.Errorf("%d containers with a liveness probe, want at least the %d services'", checked, len(processes))
	}
}

// TestPayoutRailAndRailSecretsRender: payout's rail is set from values
// (payout run alone refuses to start with none chosen), and the rails'
// credentials (a Secret's keys as environment), key files (a Secret's
// volume) and the bank file rail's directories (one shared volume) reach
// payout alone, never as plain values: in metering, which parses
// unauthenticated ingest bodies, they were the rails' private keys and the
// payees' bank files, and a ReadWriteOnce bank volume in six Deployments
// left the pods on other nodes in ContainerCreating (Multi-Attach). Payout's
// pod has an fsGroup, so uid 65532 can create the outbox directory on the
// volume whose root is root's (EACCES in bankfile's MkdirAll). The chart's
// global extra* values still reach every service (a CA bundle all need).
func TestPayoutRailAndRailSecretsRender(t *testing.T) {
	pods := workloads(t, renderChart(t, offlineChart(t), "--set", "payout.railBank=file",
		"--set", "payout.env.GPUBILL_BANK_OUTBOX_DIR=/bank/outbox", "--set", "env.GPUBILL_CYCLE_DAYS=14",
		"--set-json", `payout.extraEnvFrom=[{"secretRef":{"name":"gpubill-rails"}}]`,
		"--set-json", `payout.extraVolumes=[{"name":"alipay-keys","secret":{"secretName":"alipay-keys"}}]`,
		"--set-json", `payout.extraVolumeMounts=[{"name":"alipay-keys","mountPath":"/etc/gpubill/alipay","readOnly":true}]`,
		"--set", "payout.bankVolume.existingClaim=gpubill-bank",
		"--set-json", `extraVolumes=[{"name":"ca","configMap":{"name":"corp-ca"}}]`,
		"--set-json", `extraVolumeMounts=[{"name":"ca","mountPath":"/etc/ssl/corp","readOnly":true}]`))
	for _, name := range processes {
		p, ok := pods["Deployment/"+name]
		if !ok || len(p.Containers) != 1 {
			t.Fatalf("Deployment %s: %+v", name, p)
		}
		c := p.Containers[0]
		env := map[string]string{}
		for _, e := range c.Env {
			if e.Value != nil {
				env[e.Name] = *e.Value
			}
		}
		isPayout := name == "payout"
		if want := map[bool]string{true: "file"}[isPayout]; env["GPUBILL_PAYOUT_RAIL_BANK"] != want {
			t.Errorf("Deployment %s: GPUBILL_PAYOUT_RAIL_BANK %q, want %q", name, env["GPUBILL_PAYOUT_RAIL_BANK"], want)
		}
		if want := map[bool]string{true: "/bank/outbox"}[isPayout]; env["GPUBILL_BANK_OUTBOX_DIR"] != want || env["GPUBILL_CYCLE_DAYS"] != "14" {
			t.Errorf("Deployment %s: GPUBILL_BANK_OUTBOX_DIR %q GPUBILL_CYCLE_DAYS %q, want %q (payout.env) and 14 (env)", name, env["GPUBILL_BANK_OUTBOX_DIR"], env["GPUBILL_CYCLE_DAYS"], want)
		}
		var rails bool
		for _, e := range c.EnvFrom {
			rails = rails || (e.SecretRef != nil && e.SecretRef.Name == "gpubill-rails")
		}
		if rails != isPayout {
			t.Errorf("Deployment %s: envFrom %+v: the Secret gpubill-rails there is %v, want %v", name, c.EnvFrom, rails, isPayout)
		}
		vols := map[string]string{} // volume name: what it is
		for _, v := range p.Volumes {
			switch {
			case v.Secret != nil:
				vols[v.Name] = "secret:" + v.Secret.SecretName
			case v.PersistentVolumeClaim != nil:
				vols[v.Name] = "pvc:" + v.PersistentVolumeClaim.ClaimName
			default:
				vols[v.Name] = "other"
			}
		}
		mounts := map[string]string{} // mount path: what is there
		for _, m := range c.VolumeMounts {
			mounts[m.MountPath] = vols[m.Name]
		}
		want := map[string]string{"/etc/ssl/corp": "other"}
		if isPayout {
			want["/etc/gpubill/alipay"] = "secret:alipay-keys"
			want["/bank"] = "pvc:gpubill-bank"
		}
		if !maps.Equal(mounts, want) || len(vols) != len(want) {
			t.Errorf("Deployment %s: volumes %v mounted %v, want %v", name, vols, mounts, want)
		}
		var fsGroup *int64
		if p.SecurityContext != nil {
			fsGroup = p.SecurityContext.FSGroup
		}
		if isPayout && (fsGroup == nil || *fsGroup == 0) {
			t.Errorf("Deployment payout: pod securityContext %+v, want an fsGroup (other than root's) so uid 65532 writes the bank volume", p.SecurityContext)
		}
	}
}

// TestLedgerStatementInboxRenders: ledger.bankStatementInboxDir is the
// ledger's GPUBILL_BANK_STATEMENT_INBOX_DIR, and no other process's;
// unset, no process has it. Its volume (ledger.bankVolume) is mounted in
// the ledger's pods alone, with an fsGroup that lets uid 65532 write it:
// through the global extraVolumes every service mounted it, as the rails'
// volume once was.
func TestLedgerStatementInboxRenders(t *testing.T) {
	chart := offlineChart(t)
	for _, set := range []string{"/srv/bank/statements", ""} {
		pods := workloads(t, renderChart(t, chart, "--set", "ledger.bankStatementInboxDir="+set,
			"--set", "ledger.bankVolume.existingClaim=gpubill-statements", "--set", "ledger.bankVolume.mountPath=/srv/bank"))
		for _, name := range processes {
			p := pods["Deployment/"+name]
			var claims []string
			for _, v := range p.Volumes {
				if v.PersistentVolumeClaim != nil {
					claims = append(claims, v.PersistentVolumeClaim.ClaimName)
				}
			}
			mounted := len(p.Containers) == 1 && slices.ContainsFunc(p.Containers[0].VolumeMounts,
				func(m struct {
					Name      string `yaml:"name"`
					MountPath string `yaml:"mountPath"`
				}) bool {
					return m.MountPath == "/srv/bank"
				})
			isLedger := name == "ledger"
			if want := map[bool][]string{true: {"gpubill-statements"}}[isLedger]; !slices.Equal(claims, want) || mounted != isLedger {
				t.Errorf("Deployment %s: claims %v, /srv/bank mounted %v; want %v and %v", name, claims, mounted, want, isLedger)
			}
			if isLedger && (p.SecurityContext == nil || p.SecurityContext.FSGroup == nil || *p.SecurityContext.FSGroup == 0) {
				t.Errorf("Deployment ledger: pod securityContext %+v, want an fsGroup so uid 65532 writes processed/", p.SecurityContext)
			}
		}
		for _, name := range processes {
			p, ok := pods["Deployment/"+name]
			if !ok || len(p.Containers) != 1 {
				t.Fatalf("Deployment %s: %+v", name, p)
			}
			dir := ""
			for _, e := range p.Containers[0].Env {
				if e.Name == "GPUBILL_BANK_STATEMENT_INBOX_DIR" && e.Value != nil {
					dir = *e.Value
				}
			}
			if want := map[bool]string{true: set}[name == "ledger"]; dir != want {
				t.Errorf("Deployment %s with the inbox %q: GPUBILL_BANK_STATEMENT_INBOX_DIR %q, want %q", name, set, dir, want)
			}
		}
	}
}

// TestTemporalGetsItsNamespaceAndDatabases: Temporal, installed with the
// chart, creates the namespace payout and settlement work in ("default":
// the chart creates none unless asked, and the workers failed "namespace
// default is not found"), and its persistence and visibility databases are
// the ones the CloudNativePG cluster creates at bootstrap, owned by the user
// Temporal connects as, with that user's password from the cluster's Secret
// (the cluster made only gpubill's database, and its user cannot create one).
func TestTemporalGetsItsNamespaceAndDatabases(t *testing.T) {
	values := readChartValues(t)
	ns := values.Temporal.Server.Config.Namespaces
	if !ns.Create || !slices.ContainsFunc(ns.Namespace, func(n struct{ Name string }) bool { return n.Name == "default" }) {
		t.Errorf("temporal.server.config.namespaces %+v: want namespace default created", ns)
	}
	var cluster struct {
		Bootstrap struct {
			InitDB struct {
				Owner       string   `yaml:"owner"`
				PostInitSQL []string `yaml:"postInitSQL"`
			} `yaml:"initdb"`
		} `yaml:"bootstrap"`
	}
	c, ok := renderChart(t, offlineChart(t))["Cluster/"+values.Postgres.Cluster.Name]
	if !ok {
		t.Fatalf("no Cluster %s rendered", values.Postgres.Cluster.Name)
	}
	if err := c.Spec.Decode(&cluster); err != nil {
		t.Fatal(err)
	}
	initdb := cluster.Bootstrap.InitDB
	for _, store := range []string{"default", "visibility"} {
		s := values.Temporal.Server.Config.Persistence[store].SQL
		if want := "create database " + s.Database + " owner " + initdb.Owner; s.Database == "" || !slices.Contains(initdb.PostInitSQL, want) {
			t.Errorf("temporal %s store: database %q; want %q in the cluster's postInitSQL %v", store, s.Database, want, initdb.PostInitSQL)
		}
		if s.User != initdb.Owner || s.ExistingSecret != values.Postgres.Cluster.Name+"-app" {
			t.Errorf("temporal %s store: user %q, secret %q; want %q from %s-app", store, s.User, s.ExistingSecret, initdb.Owner, values.Postgres.Cluster.Name)
		}
	}
}

// TestChartPostgresHoldsEveryPool: the CloudNativePG cluster keeps what it
// acknowledged through a failover and takes every connection the chart's
// pools may open, and the ledger's old replicas stop before a new one
// migrates.
//   - Replication is synchronous, at least one standby, data durability
//     required: every consumer acks its message (a work queue deletes it)
//     after its commit returns, so a standby promoted without that commit
//     would lose the charge with nothing left to redeliver.
//   - max_connections covers every service replica's pool and every Temporal
//     pod's two stores: past it a deposit or a cycle's close met "too many
//     clients".
//   - The ledger Deployment is Recreate (README "Upgrading").
func TestChartPostgresHoldsEveryPool(t *testing.T) {
	values := readChartValues(t)
	objects := renderChart(t, offlineChart(t))
	c, ok := objects["Cluster/"+values.Postgres.Cluster.Name]
	if !ok {
		t.Fatalf("no Cluster %s rendered", values.Postgres.Cluster.Name)
	}
	var cluster struct {
		Instances  int `yaml:"instances"`
		PostgreSQL struct {
			Synchronous struct {
				Method         string `yaml:"method"`
				Number         int    `yaml:"number"`
				DataDurability string `yaml:"dataDurability"`
			} `yaml:"synchronous"`
			Parameters map[string]string `yaml:"parameters"`
		} `yaml:"postgresql"`
	}
	if err := c.Spec.Decode(&cluster); err != nil {
		t.Fatal(err)
	}
	if s := cluster.PostgreSQL.Synchronous; s.Number < 1 || s.Number >= cluster.Instances || s.DataDurability != "required" || (s.Method != "any" && s.Method != "first") {
		t.Errorf("Cluster postgresql.synchronous %+v with %d instances: want at least one standby (fewer than the instances), data durability required", s, cluster.Instances)
	}
	var want int
	for name, s := range values.Services {
		if s.Replicas < 1 {
			t.Errorf("service %s: %d replicas", name, s.Replicas)
		}
		want += s.Replicas * svc.StandalonePoolConns
	}
	temporalPods := 4 * max(values.Temporal.Server.ReplicaCount, 1) // frontend, history, matching, worker
	for store, p := range values.Temporal.Server.Config.Persistence {
		if p.SQL.MaxConns < 1 {
			t.Errorf("temporal store %s: maxConns unset (the Temporal chart's default is not bounded by this chart)", store)
		}
		want += temporalPods * p.SQL.MaxConns
	}
	want += 10 // the operator's, replication's and superuser_reserved_connections
	var got int
	if _, err := fmt.Sscan(cluster.PostgreSQL.Parameters["max_connections"], &got); err != nil || got < want {
		t.Errorf("Cluster max_connections %q, want at least %d (every pool that connects)", cluster.PostgreSQL.Parameters["max_connections"], want)
	}
	d, ok := objects["Deployment/ledger"]
	if !ok {
		t.Fatal("no Deployment ledger")
	}
	var spec struct {
		Strategy struct{ Type string } `yaml:"strategy"`
	}
	if err := d.Spec.Decode(&spec); err != nil || spec.Strategy.Type != "Recreate" {
		t.Errorf("Deployment ledger: strategy %+v (%v), want Recreate", spec.Strategy, err)
	}
}

// chartValues is what the chart tests read of values.yaml.
type chartValues struct {
	Postgres struct {
		Cluster struct{ Name string } `yaml:"cluster"`
	} `yaml:"postgres"`
	Services map[string]struct {
		Replicas int `yaml:"replicas"`
	} `yaml:"services"`
	Temporal struct {
		Server struct {
			ReplicaCount int `yaml:"replicaCount"`
			Config       struct {
				Namespaces struct {
					Create    bool
					Namespace []struct{ Name string }
				}
				Persistence map[string]struct {
					SQL struct {
						Database       string `yaml:"database"`
						User           string `yaml:"user"`
						ExistingSecret string `yaml:"existingSecret"`
						MaxConns       int    `yaml:"maxConns"`
					} `yaml:"sql"`
				}
			}
		}
	}
}

func readChartValues(t *testing.T) chartValues {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v chartValues
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestLedgerImageUpgradesAlone: README's "Upgrading" rolls the ledger out
// before the other services. With one image tag for every service a `helm
// upgrade` rolls them all at once and that order cannot be kept: a service's
// own `image.tag` overrides the chart's, so the ledger's tag can move first.
func TestLedgerImageUpgradesAlone(t *testing.T) {
	pods := workloads(t, renderChart(t, offlineChart(t), "--set", "image.tag=0.1.0", "--set", "services.ledger.image.tag=0.2.0"))
	for _, name := range processes {
		pod, ok := pods["Deployment/"+name]
		if !ok || len(pod.Containers) == 0 {
			t.Errorf("no Deployment/%s rendered", name)
			continue
		}
		want := "gpubill/" + name + ":0.1.0"
		if name == "ledger" {
			want = "gpubill/ledger:0.2.0"
		}
		if got := pod.Containers[0].Image; got != want {
			t.Errorf("Deployment/%s image %q, want %q", name, got, want)
		}
	}
}
