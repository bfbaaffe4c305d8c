package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/testkit"
)

// The JetStream cluster test's shape.
const (
	jsNodes    = 3
	jsReplicas = 3 // GPUBILL_STREAM_REPLICAS the services get
	// jsFailoverWithin bounds how long events accepted after a node's
	// SIGKILL may take to be charged while it stays down: new stream and
	// consumer leaders are elected in seconds (nats-server's election
	// timeouts are 2–5 s); the rest is the clients reconnecting and the
	// outbox's retry.
	jsFailoverWithin = 2 * time.Minute
	// jsCaughtUpWithin bounds how long the restarted node takes to be a
	// current replica of every stream and consumer again.
	jsCaughtUpWithin = 2 * time.Minute
	// jsRequestsAfterKill is how many ingest requests must be accepted
	// after the kill before the test waits for them to be charged, so the
	// wait proves charging with the node down, not before.
	jsRequestsAfterKill = 8
	// jsSendEvery paces the ingest (40 events a request): R3 streams write
	// every message on three servers of one 2-core machine, so 40 % of
	// the chaos test's pace keeps a loaded machine's backlog short.
	jsSendEvery = 250 * time.Millisecond
)

// natsNode is one nats-server of the test's JetStream cluster.
type natsNode struct {
	*proc
	server        string // server_name, as stream info names replicas
	client, route int
}

func (n *natsNode) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.client) }

// jsCluster is three nats-server processes, each with its own store
// directory and free client and route ports on loopback, routed to each
// other.
type jsCluster struct {
	t     *testing.T
	nodes []*natsNode
}

// urls is every node's client URL, comma-separated: what NATS_URL gets,
// so a client whose server dies reconnects to another.
func (j *jsCluster) urls() string {
	us := make([]string, len(j.nodes))
	for i, n := range j.nodes {
		us[i] = n.url()
	}
	return strings.Join(us, ",")
}

func (j *jsCluster) node(server string) *natsNode {
	for _, n := range j.nodes {
		if n.server == server {
			return n
		}
	}
	j.t.Fatalf("no node %q in the cluster", server)
	return nil
}

// startJSCluster starts the three nodes and waits until the cluster can
// place an R3 stream (its meta group has a leader and all three peers).
func startJSCluster(c *cluster) *jsCluster {
	t := c.t
	j := &jsCluster{t: t}
	for i := 0; i < jsNodes; i++ {
		j.nodes = append(j.nodes, &natsNode{server: fmt.Sprintf("n%d", i+1), client: freePort(t), route: freePort(t)})
	}
	for _, n := range j.nodes {
		var routes []string
		for _, o := range j.nodes {
			if o != n {
				routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", o.route))
			}
		}
		// Room for every stream's byte cap on every node (the file store
		// reserves nothing on disk).
		body := fmt.Sprintf(`server_name: %s
listen: "127.0.0.1:%d"
jetstream {
  store_dir: %q
  max_memory_store: 64MB
  max_file_store: 64GB
}
cluster {
  name: gpubill-test
  listen: "127.0.0.1:%d"
  routes: [%s]
}
`, n.server, n.client, filepath.Join(c.dir, "nats-"+n.server), n.route, strings.Join(routes, ", "))
		conf := filepath.Join(c.dir, "nats-"+n.server+".conf")
		if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		n.proc = &proc{name: "nats-" + n.server, bin: filepath.Join(c.bins, "nats-server"), args: []string{"-c", conf}, log: filepath.Join(c.dir, "nats-"+n.server+".log")}
		if err := n.start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.stop)
		c.others = append(c.others, n.proc)
	}
	for _, n := range j.nodes {
		j.waitUp(n)
	}
	// An R3 stream is placed only once the meta group has a leader and
	// knows all three servers: create one until it is, then drop it.
	nc, js, err := natsx.Connect(j.urls(), "cluster-probe")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var last error
	testkit.Eventually(t, readyWithin, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, last = js.CreateStream(ctx, jetstream.StreamConfig{Name: "PROBE", Subjects: []string{"probe.>"}, Replicas: jsReplicas, Storage: jetstream.FileStorage})
		return last == nil || errors.Is(last, jetstream.ErrStreamNameAlreadyInUse)
	}, "the JetStream cluster places an R%d stream (last error: %v)", jsReplicas, &last)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := js.DeleteStream(ctx, "PROBE"); err != nil {
		t.Fatal(err)
	}
	return j
}

func (j *jsCluster) waitUp(n *natsNode) {
	testkit.Eventually(j.t, readyWithin, func() bool {
		if !n.running() {
			j.t.Fatalf("%s exited:\n%s", n.name, n.tail(30))
		}
		return portOpen(fmt.Sprintf("127.0.0.1:%d", n.client))
	}, "%s on port %d", n.name, n.client)
}

// placement is where a stream's or consumer's replicas are.
type placement struct {
	what     string // "stream USAGE" or "consumer USAGE/pricing-rating"
	replicas int    // as configured
	leader   string
	peers    []string // every server holding it, the leader included
	// lagging names the followers that are offline or not current.
	lagging []string
}

// placements lists every stream and durable consumer of the cluster.
func placements(ctx context.Context, js jetstream.JetStream) ([]placement, error) {
	var out []placement
	add := func(what string, replicas int, ci *jetstream.ClusterInfo) {
		p := placement{what: what, replicas: replicas}
		if ci != nil {
			p.leader = ci.Leader
			if ci.Leader != "" {
				p.peers = append(p.peers, ci.Leader)
			}
			for _, r := range ci.Replicas {
				p.peers = append(p.peers, r.Name)
				if r.Offline || !r.Current {
					p.lagging = append(p.lagging, r.Name)
				}
			}
		}
		sort.Strings(p.peers)
		out = append(out, p)
	}
	streams := js.ListStreams(ctx)
	var infos []*jetstream.StreamInfo
	for si := range streams.Info() {
		infos = append(infos, si)
	}
	if err := streams.Err(); err != nil {
		return nil, fmt.Errorf("list streams: %w", err)
	}
	for _, si := range infos {
		add("stream "+si.Config.Name, si.Config.Replicas, si.Cluster)
		st, err := js.Stream(ctx, si.Config.Name)
		if err != nil {
			return nil, fmt.Errorf("stream %s: %w", si.Config.Name, err)
		}
		cons := st.ListConsumers(ctx)
		for ci := range cons.Info() {
			if ci.Config.Durable == "" {
				continue // an ordered consumer: R1 in memory by design, remade on loss
			}
			r := ci.Config.Replicas
			if r == 0 { // inherits the stream's
				r = si.Config.Replicas
			}
			add("consumer "+si.Config.Name+"/"+ci.Name, r, ci.Cluster)
		}
		if err := cons.Err(); err != nil {
			return nil, fmt.Errorf("consumers of %s: %w", si.Config.Name, err)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].what < out[b].what })
	return out, nil
}

// TestJetStreamClusterSurvivesNodeKill runs the pipeline (metering →
// pricing → ledger, each its own process) on a three-node JetStream
// cluster with R3 streams (GPUBILL_STREAM_REPLICAS=3, every node's URL in
// NATS_URL) while usage flows, SIGKILLs the node leading the USAGE stream,
// proves the pipeline goes on charging with that node down (every stream
// and consumer it led has a new leader), restarts it, and waits until it
// is a current replica of everything again. Then every accepted event is
// charged exactly once (in SQL, as the chaos test checks) and nothing is
// left pending.
func TestJetStreamClusterSurvivesNodeKill(t *testing.T) {
	if os.Getenv("GPUBILL_SKIP_CHAOS") != "" {
		t.Skip("GPUBILL_SKIP_CHAOS set")
	}
	began := time.Now()
	var j *jsCluster
	c := newClusterOf(t, clusterSpec{
		names:      []string{"metering", "pricing", "ledger"},
		noTemporal: true,
		nats: func(c *cluster) string {
			j = startJSCluster(c)
			return j.urls()
		},
		env: []string{fmt.Sprintf("GPUBILL_STREAM_REPLICAS=%d", jsReplicas)},
	})
	started := time.Since(began)
	// phase logs how long the test has run, so a slow run shows where.
	phase := func(what string) { t.Logf("%6s %s", time.Since(began).Round(100*time.Millisecond), what) }
	phase("processes up")
	nc, js, err := natsx.Connect(j.urls(), "cluster-check")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	place := func() []placement {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ps, err := placements(ctx, js)
		if err != nil {
			t.Logf("placements: %v", err)
		}
		return ps
	}
	c.seed()
	phase("seeded")

	// Every stream and consumer is on all three servers.
	all := make([]string, 0, jsNodes)
	for _, n := range j.nodes {
		all = append(all, n.server)
	}
	sort.Strings(all)
	// The services make their streams and consumers as they start; wait
	// until the pipeline's are there.
	pipeline := []placement{{what: "stream " + natsx.StreamUsage}, {what: "stream " + natsx.StreamCharges}, {what: "stream " + natsx.StreamParty},
		{what: "consumer " + natsx.StreamUsage + "/pricing-rating"}, {what: "consumer " + natsx.StreamCharges + "/ledger-charges"}}
	var ps []placement
	testkit.Eventually(t, 30*time.Second, func() bool {
		ps = place()
		return coversAll(ps, pipeline)
	}, "the pipeline's streams and consumers (last seen: %v)", &ps)
	for _, p := range ps {
		if p.replicas != jsReplicas || p.leader == "" || strings.Join(p.peers, ",") != strings.Join(all, ",") {
			t.Errorf("%s: %d replicas on %v led by %q, want %d on %v", p.what, p.replicas, p.peers, p.leader, jsReplicas, all)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	s := newSender(c)
	s.every = jsSendEvery
	go s.run()
	t.Cleanup(s.abandon)
	c.waitCharged(s, "warm-up")
	phase("warm-up charged")

	// The victim leads USAGE: its leadership must move for ingest to go on.
	now := place()
	var victim *natsNode
	for _, p := range now {
		if p.what == "stream "+natsx.StreamUsage {
			victim = j.node(p.leader)
		}
	}
	if victim == nil {
		t.Fatalf("no leader of %s in %v", natsx.StreamUsage, now)
	}
	led := map[string]bool{}
	for _, p := range now {
		if p.leader == victim.server {
			led[p.what] = true
		}
	}
	kill := time.Now()
	before := s.lastAccepted().batch
	if err := victim.kill9(); err != nil {
		t.Fatal(err)
	}
	if portOpen(fmt.Sprintf("127.0.0.1:%d", victim.client)) {
		t.Fatalf("%s killed but its client port still answers", victim.name)
	}
	t.Logf("kill -9 %s, leader of %d streams and consumers (%s among them)", victim.server, len(led), "stream "+natsx.StreamUsage)

	// With the node down, usage accepted since the kill is charged, and
	// every stream and consumer has a leader among the two servers left.
	testkit.Eventually(t, jsFailoverWithin, func() bool { return s.lastAccepted().batch >= before+jsRequestsAfterKill },
		"%d requests accepted after the kill", jsRequestsAfterKill)
	c.waitChargedWithin(s, "with "+victim.server+" down", jsFailoverWithin)
	failover := time.Since(kill)
	phase("charged with " + victim.server + " down")
	var moved []placement
	testkit.Eventually(t, jsFailoverWithin, func() bool {
		moved = place()
		for _, p := range moved {
			if p.leader == "" || p.leader == victim.server {
				return false
			}
		}
		return coversAll(moved, ps)
	}, "every stream and consumer has a leader other than %s (last seen: %v)", victim.server, &moved)
	for _, p := range moved {
		if led[p.what] {
			t.Logf("%s: leader %s → %s", p.what, victim.server, p.leader)
		}
	}

	restart := time.Now()
	if err := victim.start(); err != nil {
		t.Fatal(err)
	}
	j.waitUp(victim)
	c.waitCharged(s, victim.server+" back")
	var last []placement
	testkit.Eventually(t, jsCaughtUpWithin, func() bool {
		last = place()
		if !coversAll(last, ps) {
			return false
		}
		for _, p := range last {
			if p.leader == "" || len(p.lagging) > 0 || strings.Join(p.peers, ",") != strings.Join(all, ",") {
				return false
			}
		}
		return true
	}, "%s a current replica of every stream and consumer again (last seen: %v)", victim.server, &last)
	caughtUp := time.Since(restart)

	phase("killed node a current replica again")
	s.stop()
	acc := s.snapshot()
	if s.rejected() != "" {
		t.Fatalf("ingest rejected events: %s", s.rejected())
	}
	c.waitDrained(len(acc))
	phase("drained")
	c.checkEvents(acc)
	c.checkCharges(acc)
	c.checkNothingStuck()
	phase("checked")
	t.Logf("JetStream cluster: %d events accepted in %d requests (%d client errors retried); started in %s, charged again %s after the kill, the killed node a current replica again %s after its restart, total %s",
		len(acc), s.requests, s.errors, started.Round(time.Millisecond), failover.Round(time.Millisecond), caughtUp.Round(time.Millisecond), time.Since(began).Round(time.Second))
}

// coversAll: every stream and consumer of want is in got. Streams and
// consumers made once traffic flows (the LEASE stream, say) may add to got;
// one whose info did not answer is missing from it, and the caller asks again.
func coversAll(got, want []placement) bool {
	have := make(map[string]bool, len(got))
	for _, p := range got {
		have[p.what] = true
	}
	for _, p := range want {
		if !have[p.what] {
			return false
		}
	}
	return true
}
