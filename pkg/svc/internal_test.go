package svc

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/server"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef")

// The internal connections ping every 10 s (gRPC's floor) in these tests,
// and give up on a ping after 2.
func TestMain(m *testing.M) {
	internalKeepalive.Time, internalKeepalive.Timeout = 10*time.Second, 2*time.Second
	os.Exit(m.Run())
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	accepted atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

// replica is a stand-in for one replica of a service: a gRPC server with
// the real server's keepalive settings that counts the calls it answers.
func replica(t *testing.T) (addr string, calls *atomic.Int64) {
	addr, calls, _ = replicaCounted(t)
	return addr, calls
}

func replicaCounted(t *testing.T) (addr string, calls *atomic.Int64, lis *countingListener) {
	t.Helper()
	return replicaAnswering(t, nil)
}

// replicaAnswering is replica answering every call with refuse's error
// when it gives one.
func replicaAnswering(t *testing.T, refuse func() error) (addr string, calls *atomic.Int64, lis *countingListener) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis = &countingListener{Listener: l}
	calls = &atomic.Int64{}
	gs := grpc.NewServer(append(server.KeepaliveOptions(), grpc.UnaryInterceptor(
		func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			calls.Add(1)
			if refuse != nil {
				if err := refuse(); err != nil {
					return nil, err
				}
			}
			return h(ctx, req)
		}))...)
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go gs.Serve(lis) //nolint:errcheck // Stop ends it
	t.Cleanup(gs.Stop)
	return lis.Addr().String(), calls, lis
}

// dialReplicas is DialInternal to a name resolving to addrs.
func dialReplicas(t *testing.T, addrs ...string) healthpb.HealthClient {
	t.Helper()
	r := manual.NewBuilderWithScheme("replicas")
	var st resolver.State
	for _, a := range addrs {
		st.Addresses = append(st.Addresses, resolver.Address{Addr: a})
	}
	r.InitialState(st)
	conn, err := DialInternal(testSecret, "replicas:///ledger", "settlement", grpc.WithResolvers(r))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return healthpb.NewHealthClient(conn)
}

func check(ctx context.Context, c healthpb.HealthClient, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// An internal connection to a name with several replicas spreads its calls
// over them: with gRPC's default (pick_first) one replica took every call
// of a caller, however many the Deployment ran.
func TestInternalCallsSpreadOverReplicas(t *testing.T) {
	t.Parallel()
	a, callsA := replica(t)
	b, callsB := replica(t)
	c := dialReplicas(t, a, b)
	ctx := context.Background()
	// Round robin spreads over the replicas it has connected to: until the
	// second's connection is ready (a loaded machine: 37 of 40 calls on the
	// first) the calls go to the first. Counted once both have answered.
	deadline := time.Now().Add(10 * time.Second)
	for callsA.Load() == 0 || callsB.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: %d calls on one replica, %d on the other; want both reached", callsA.Load(), callsB.Load())
		}
		if err := check(ctx, c, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	callsA.Store(0)
	callsB.Store(0)
	for range 40 {
		if err := check(ctx, c, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if callsA.Load() < 10 || callsB.Load() < 10 {
		t.Fatalf("40 calls: %d on one replica, %d on the other", callsA.Load(), callsB.Load())
	}
}

// blackhole forwards TCP to target until cut, then swallows both ways and
// keeps the sockets open: a peer whose node vanished (no FIN, no RST).
type blackhole struct {
	addr string
	cut  atomic.Bool
}

func newBlackhole(t *testing.T, target string) *blackhole {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bh := &blackhole{addr: lis.Addr().String()}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		lis.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if err != nil {
				return
			}
			if !bh.cut.Load() {
				if _, err := dst.Write(buf[:n]); err != nil {
					return
				}
			}
		}
	}
	go func() {
		for {
			in, err := lis.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, in, out)
			mu.Unlock()
			if bh.cut.Load() { // a new connection to a vanished node: nothing answers
				wg.Add(1)
				go func() { defer wg.Done(); io.Copy(io.Discard, in) }() //nolint:errcheck // read until the cleanup closes it
				continue
			}
			wg.Add(2)
			go pipe(out, in)
			go pipe(in, out)
		}
	}()
	return bh
}

// A replica that vanishes without closing its connections is left within
// the keepalive's ping interval and timeout, and the calls go to the
// others: without pings every call the balancer sent to it hung until its
// deadline, for as long as the kernel kept the socket (~15 min).
func TestInternalConnLeavesAVanishedReplica(t *testing.T) {
	t.Parallel()
	a, _ := replica(t)
	b, _ := replica(t)
	bh := newBlackhole(t, a)
	c := dialReplicas(t, bh.addr, b)
	ctx := context.Background()
	for range 4 {
		if err := check(ctx, c, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	bh.cut.Store(true)
	cut := time.Now()
	for ok := 0; ok < 20; {
		if time.Since(cut) > 30*time.Second {
			t.Fatalf("%s after the replica vanished, calls still go to it", time.Since(cut).Round(time.Second))
		}
		if err := check(ctx, c, time.Second); err != nil {
			ok = 0
			continue
		}
		ok++
	}
	t.Logf("calls answered again %s after the replica vanished", time.Since(cut).Round(100*time.Millisecond))
}

// The server lets an idle internal connection's pings in: with gRPC's
// default policy (a ping per 5 minutes, none without a call in flight) the
// third ping of an idle connection was answered with GOAWAY
// "too_many_pings", and the connection was dropped and made again.
func TestServerKeepsAnIdleInternalConnection(t *testing.T) {
	t.Parallel()
	a, _, lis := replicaCounted(t)
	c := dialReplicas(t, a)
	ctx := context.Background()
	if err := check(ctx, c, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3*internalKeepalive.Time + 5*time.Second)
	if err := check(ctx, c, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := lis.accepted.Load(); n != 1 {
		t.Fatalf("%d connections made over %s idle, want 1", n, 3*internalKeepalive.Time+5*time.Second)
	}
}

// A downstream's refusal of the calling service's own credentials reaches
// the outside caller as an internal error (logged), not as a 401 or 403
// blaming their token with the peer's identity in it; the calling service
// still reads the downstream's code, and the downstream's other answers
// (a 404, a 409) reach the caller as they are.
func TestDownstreamRefusalIsNotTheCallersOwn(t *testing.T) {
	t.Parallel()
	var answer atomic.Value
	addr, _, _ := replicaAnswering(t, func() error { return answer.Load().(error) })
	c := dialReplicas(t, addr)
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		downstream error
		want       codes.Code
	}{
		{status.Error(codes.PermissionDenied, "role service (subject pricing) may not call /gpubill.tax.v1.TaxService/Split"), codes.Internal},
		{status.Error(codes.Unauthenticated, "token signature invalid"), codes.Internal},
		{status.Error(codes.NotFound, "provider p-9 not found"), codes.NotFound},
		{status.Error(codes.Aborted, "key k-1 holds another transaction"), codes.Aborted},
	} {
		answer.Store(tc.downstream)
		err := check(ctx, c, 10*time.Second)
		if got := status.Code(err); got != status.Code(tc.downstream) {
			t.Errorf("%v: the calling service reads %v", tc.downstream, got)
		}
		pub := status.Convert(apperr.Public(ctx, log, "/gpubill.pricing.v1.PricingService/Quote", fmt.Errorf("quote: %w", err)))
		if pub.Code() != tc.want {
			t.Errorf("%v: the outside caller gets %v %q, want %v", tc.downstream, pub.Code(), pub.Message(), tc.want)
		}
		if tc.want == codes.Internal && strings.Contains(pub.Message(), status.Convert(tc.downstream).Message()) {
			t.Errorf("%v: the outside caller reads %q", tc.downstream, pub.Message())
		}
	}
}
