// Package stack composes every gpubill service into one process: the
// single-binary edition behind `gpubill dev` and the end-to-end tests.
package stack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"google.golang.org/grpc"

	"github.com/gpubill/gpubill/pkg/audit"
	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/cmdline"
	"github.com/gpubill/gpubill/pkg/config"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/deadletter"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/pg"
	gsrv "github.com/gpubill/gpubill/pkg/server"
	"github.com/gpubill/gpubill/pkg/split"
	"github.com/gpubill/gpubill/pkg/svc"
	"github.com/gpubill/gpubill/pkg/taxperiod"
	"github.com/gpubill/gpubill/pkg/tempdev"
	"github.com/gpubill/gpubill/services/ledger"
	"github.com/gpubill/gpubill/services/metering"
	"github.com/gpubill/gpubill/services/payout"
	"github.com/gpubill/gpubill/services/pricing"
	"github.com/gpubill/gpubill/services/settlement"
	"github.com/gpubill/gpubill/services/tax"
)

const (
	poolConnsMax       = 24
	temporalDialWithin = 90 * time.Second
	settlementQueue    = "settlement"
)

// Config is what the stack needs beyond config.Common.
type Config struct {
	config.Common
	NATSAddr     string // embedded NATS listener (GPUBILL_NATS_ADDR)
	TemporalAddr string // embedded Temporal listener (GPUBILL_TEMPORAL_ADDR)
	Log          *slog.Logger
	Clock        clock.Clock
	// LeaseControl configures the ledger's lease control; nil = from the
	// environment (GPUBILL_LEASE_CONTROL_URL, _SECRET, GPUBILL_RUNWAY_WARN).
	LeaseControl *ledger.LeaseControlConfig
}

// Stack is a running single-process gpubill.
type Stack struct {
	HTTPAddr string
	GRPCAddr string
	NATSURL  string
	Temporal string
	Secret   []byte
	Pool     *pgxpool.Pool

	log      *slog.Logger
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	closers  []func()
	srv      *gsrv.Server
	runErr   chan error
	stopOnce sync.Once
}

// settings are the parts of the configuration Start checks before it
// starts anything.
type settings struct {
	cal         cycles.Calendar
	taxPeriods  taxperiod.Calendar
	commission  split.CommissionPolicy
	streams     natsx.Limits
	lateArrival time.Duration
	allow       auth.Allowlist
	proxies     []netip.Prefix
	lease       ledger.LeaseControlConfig
}

func loadSettings(cfg Config) (st settings, err error) {
	if st.cal, err = cfg.Calendar(); err != nil {
		return st, err
	}
	if st.taxPeriods, err = cfg.TaxPeriods(); err != nil {
		return st, err
	}
	if st.commission, err = cfg.Commission(); err != nil {
		return st, err
	}
	if st.lateArrival, err = cfg.LateArrival(); err != nil {
		return st, err
	}
	if st.streams, err = cfg.StreamLimits(); err != nil {
		return st, err
	}
	if st.allow, err = cfg.Allowlist(); err != nil {
		return st, err
	}
	if st.proxies, err = cfg.Proxies(); err != nil {
		return st, err
	}
	if cfg.LeaseControl != nil {
		st.lease = *cfg.LeaseControl
	} else if st.lease, err = ledger.LeaseControlConfigFromEnv(); err != nil {
		return st, err
	}
	return st, nil
}

// Start brings up NATS (embedded unless NATS_URL), Temporal (a dev server
// child unless TEMPORAL_ADDRESS), the database, every service and the
// listeners. Stop undoes it in reverse. It refuses (ErrStackRunning) a
// database another gpubill stack or service runs on.
func Start(ctx context.Context, cfg Config) (_ *Stack, err error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.System{}
	}
	st, err := loadSettings(cfg)
	if err != nil {
		return nil, cmdline.UsageError{Err: err}
	}
	if err := openDataDir(cfg.DataDir); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &Stack{log: cfg.Log, cancel: cancel, runErr: make(chan error, 16)}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()
	if s.Secret, err = auth.LoadOrCreateSecret(cfg.AuthSecret, cfg.DataDir); err != nil {
		return nil, fmt.Errorf("auth secret: %w", err)
	}
	nc, js, err := s.startNATS(cfg)
	if err != nil {
		return nil, err
	}
	tc, err := s.startTemporal(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if s.Pool, err = pg.Open(ctx, cfg.DatabaseURL, poolConnsMax); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, s.Pool.Close)
	// The gRPC listener comes first so the services' internal connection
	// (settlement → ledger, tax) knows where to dial.
	gl, internal, err := s.listenGRPC(cfg)
	if err != nil {
		return nil, err
	}
	deps := svc.Deps{Pool: s.Pool, JS: js, Log: cfg.Log, Clock: cfg.Clock, Calendar: st.cal, TaxPeriods: st.taxPeriods, Commission: st.commission, Internal: internal, Streams: st.streams,
		LateArrival: st.lateArrival}
	services, err := newServices(ctx, deps, tc, st.lease, cfg.DataDir)
	if err != nil {
		gl.Close()
		return nil, err
	}
	release, err := claimRelays(ctx, cfg.DatabaseURL, services)
	if err != nil {
		gl.Close()
		return nil, err
	}
	defer release()
	s.closers = append(s.closers, svc.ServeMetrics(s.Pool, js, cfg.Log, services...))
	if err := s.serve(ctx, runCtx, cfg, st, gl, services, nc, js, tc); err != nil {
		gl.Close()
		return nil, err
	}
	release() // before the relays start: they take the same locks
	s.run(runCtx, services, cfg.Log)
	return s, nil
}

// The data dir holds Temporal's store and log (every settlement's
// history: provider ids, tiers, gross per cycle, failure texts), NATS's
// streams and the auth secret: its owner's only, as backups (0700/0600)
// and reports (0600) are.
const (
	dataDirMode  = 0o700
	dataFileMode = 0o600
)

// openDataDir creates the data dir private, and makes one an earlier
// version created 0755 private (MkdirAll leaves an existing mode): only a
// directory an earlier gpubill dev filled (its Temporal log is there).
// Any other existing directory keeps its mode (--data-dir=/tmp must not
// make /tmp 0700); the files the stack writes in it are private anyway.
func openDataDir(dir string) error {
	if err := os.MkdirAll(dir, dataDirMode); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, "temporal.log")); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	return os.Chmod(dir, dataDirMode)
}

// ErrStackRunning: gpubill dev starts only on a database no other gpubill
// stack or service runs on.
var ErrStackRunning = errors.New("another gpubill stack runs on this database")

// claimRelays takes every service's outbox relay lock (outbox.RelayLockKey;
// a service's name is its schema's) on a connection of its own, and fails
// (ErrStackRunning) if another session holds one: a relay leads there, so
// a stack or a service runs on the database. Two stacks on one database each started, and once the
// first stopped the second's relays took over its outboxes, publishing to
// the second's own embedded NATS and paying on its rail. The locks are
// held through start-up, so two stacks starting together do not both pass,
// and let go by release (closing the connection ends its session and its
// locks, even if the connection is broken) just before the stack's own
// relays try them: held longer, they would keep every relay idle. A relay
// between two attempts (NATS down) holds no lock for a moment: the check
// does not see its stack then.
func claimRelays(ctx context.Context, dsn string, services []svc.Service) (_ func(), err error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("connect to take the outbox relay locks: %w", err)
	}
	var once sync.Once
	release := func() { once.Do(func() { _ = conn.Close(context.Background()) }) } // the session's end lets every lock go
	defer func() {
		if err != nil {
			release()
		}
	}()
	var held []string
	for _, x := range services {
		var locked bool
		if err := conn.QueryRow(ctx, `select pg_try_advisory_lock(hashtext($1))`, outbox.RelayLockKey(x.Name())).Scan(&locked); err != nil {
			return nil, fmt.Errorf("outbox relay lock of %s: %w", x.Name(), err)
		}
		if !locked {
			held = append(held, x.Name())
		}
	}
	if len(held) > 0 {
		return nil, fmt.Errorf("%w (the outbox relay of %s holds its lock in database %q): stop it first, or point DATABASE_URL at another database",
			ErrStackRunning, strings.Join(held, ", "), conn.Config().Database)
	}
	return release, nil
}

// startNATS connects to NATS_URL, or runs an embedded JetStream server.
func (s *Stack) startNATS(cfg Config) (*nats.Conn, jetstream.JetStream, error) {
	s.NATSURL = cfg.NatsURL
	if s.NATSURL == "" {
		ns, err := natsx.RunEmbedded(orDefault(cfg.NATSAddr, "127.0.0.1:0"), filepath.Join(cfg.DataDir, "nats"))
		if err != nil {
			return nil, nil, err
		}
		s.closers = append(s.closers, func() { shutdownNATS(ns) })
		s.NATSURL = ns.ClientURL()
	}
	nc, js, err := natsx.Connect(s.NATSURL, "gpubill")
	if err != nil {
		return nil, nil, err
	}
	s.closers = append(s.closers, func() { _ = nc.Drain() })
	return nc, js, nil
}

// startTemporal dials TEMPORAL_ADDRESS, or starts a dev server child first.
func (s *Stack) startTemporal(ctx context.Context, cfg Config) (client.Client, error) {
	s.Temporal = cfg.TemporalAddress
	if s.Temporal == "" {
		bin, err := tempdev.FindBinary()
		if err != nil {
			return nil, err
		}
		logf, err := os.OpenFile(filepath.Join(cfg.DataDir, "temporal.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, dataFileMode)
		if err != nil {
			return nil, err
		}
		if err := logf.Chmod(dataFileMode); err != nil { // one an earlier version created 0644
			logf.Close()
			return nil, fmt.Errorf("temporal log: %w", err)
		}
		dev, err := tempdev.Start(ctx, bin, orDefault(cfg.TemporalAddr, "127.0.0.1:0"), filepath.Join(cfg.DataDir, "temporal.db"), logf)
		if err != nil {
			logf.Close()
			return nil, err
		}
		s.closers = append(s.closers, func() { dev.Stop(); logf.Close() })
		s.Temporal = dev.Address
	}
	tc, err := dialTemporal(ctx, s.Temporal, cfg.Log)
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, tc.Close)
	return tc, nil
}

// listenGRPC opens the gRPC listener and the services' internal
// connection to it (role service).
func (s *Stack) listenGRPC(cfg Config) (net.Listener, *grpc.ClientConn, error) {
	gl, err := net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		return nil, nil, fmt.Errorf("listen grpc %s: %w", cfg.GRPCAddr, err)
	}
	internal, err := svc.DialInternal(s.Secret, gl.Addr().String(), "gpubill")
	if err != nil {
		gl.Close()
		return nil, nil, err
	}
	s.closers = append(s.closers, func() { _ = internal.Close() })
	return gl, internal, nil
}

// serve starts the gRPC and REST listeners over every service, the
// dead-letter operations over every schema and the audit of writes.
func (s *Stack) serve(ctx, runCtx context.Context, cfg Config, st settings, gl net.Listener, services []svc.Service,
	nc *nats.Conn, js jetstream.JetStream, tc client.Client) error {
	regs := make([]gsrv.Service, len(services), len(services)+1)
	sinks := make([]*deadletter.Sink, len(services))
	names := make([]string, len(services))
	for i, x := range services {
		regs[i], names[i] = x, x.Name()
		sinks[i] = deadletter.New(s.Pool, x.Name(), cfg.Log) // each schema is named after its service
	}
	regs = append(regs, deadletter.NewServer(sinks...)) // one GET /v1/ops/dead-letters over every service
	// Every service's writes are audited into its own outbox (the ledger
	// stores them): the AUDIT stream must exist before any relay publishes.
	if err := st.streams.EnsureStreams(ctx, js, cfg.Log, natsx.StreamAudit); err != nil {
		return err
	}
	var err error
	s.srv, err = gsrv.Start(ctx, gsrv.Options{
		GRPCListener: gl, HTTPAddr: cfg.HTTPAddr, Secret: s.Secret, Log: cfg.Log, Services: regs,
		Allow: st.allow, TrustedProxies: st.proxies, Audit: audit.New(audit.PoolStore{Pool: s.Pool}, cfg.Log, names...),
		Ready:        readiness(s.Pool, nc, js, tc),
		HTTPHandlers: map[string]http.Handler{"GET /v1/ops/consumer-lag": consumerLag(s.Secret, js)},
	})
	if err != nil {
		return err
	}
	s.HTTPAddr, s.GRPCAddr = s.srv.HTTPAddr, s.srv.GRPCAddr
	go func() {
		select {
		case err := <-s.srv.Err():
			s.runErr <- fmt.Errorf("listener: %w", err)
		case <-runCtx.Done():
		}
	}()
	return nil
}

// run runs every service until runCtx ends; a service that stops with an
// error is reported on Err.
func (s *Stack) run(runCtx context.Context, services []svc.Service, lg *slog.Logger) {
	for _, x := range services {
		s.wg.Add(1)
		go func(x svc.Service) {
			defer s.wg.Done()
			if err := x.Run(runCtx); err != nil && !errors.Is(err, context.Canceled) {
				lg.Error("service stopped", "service", x.Name(), "err", err)
				s.runErr <- fmt.Errorf("%s: %w", x.Name(), err)
			}
		}(x)
	}
}

func newServices(ctx context.Context, d svc.Deps, tc client.Client, lease ledger.LeaseControlConfig, dataDir string) ([]svc.Service, error) {
	// Producers first, so the streams a consumer attaches to already exist.
	ctors := []struct {
		name string
		new  func() (svc.Service, error)
	}{
		{"metering", func() (svc.Service, error) { return metering.New(ctx, d) }},
		{"pricing", func() (svc.Service, error) { return pricing.New(ctx, d) }},
		{"ledger", func() (svc.Service, error) { return ledger.New(ctx, d, ledger.WithLeaseControl(lease)) }},
		{"tax", func() (svc.Service, error) { return tax.New(ctx, d) }},
		{"payout", func() (svc.Service, error) {
			pc, err := payout.ConfigFromEnv()
			if err != nil {
				return nil, err
			}
			pc.DataDir = dataDir // webhook.key, when no GPUBILL_WEBHOOK_KEY_FILE / GPUBILL_WEBHOOK_KEY
			return payout.New(ctx, d, tc, payout.TaskQueueDefault, pc)
		}},
		{"settlement", func() (svc.Service, error) { return settlement.New(ctx, d, tc, settlementQueue) }},
	}
	out := make([]svc.Service, 0, len(ctors))
	for _, c := range ctors {
		x, err := c.new()
		if err != nil {
			return nil, fmt.Errorf("start %s: %w", c.name, err)
		}
		out = append(out, x)
	}
	return out, nil
}

// consumerLag serves every JetStream consumer's backlog, so a stalled hop
// (events accepted but not charged) is visible to finance and operators.
func consumerLag(secret []byte, js jetstream.JetStream) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		p, err := auth.Verify(secret, tok)
		if err != nil {
			http.Error(w, `{"code":16,"message":"missing or invalid bearer token"}`, http.StatusUnauthorized)
			return
		}
		if p.Role != auth.RoleFinance && p.Role != auth.RoleAdmin && p.Role != auth.RoleAuditor {
			http.Error(w, `{"code":7,"message":"finance, auditor or admin only"}`, http.StatusForbidden)
			return
		}
		lags, err := natsx.ConsumerLags(r.Context(), js)
		if err != nil {
			http.Error(w, `{"code":14,"message":"jetstream unavailable"}`, http.StatusServiceUnavailable)
			return
		}
		b, err := json.Marshal(map[string]any{"consumers": lags})
		if err != nil {
			http.Error(w, `{"code":13,"message":"internal error"}`, http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(append(b, '\n'))
	})
}

func readiness(pool *pgxpool.Pool, nc *nats.Conn, js jetstream.JetStream, tc client.Client) []gsrv.Check {
	return []gsrv.Check{
		{Name: "database", Check: pool.Ping},
		{Name: "nats", Check: func(ctx context.Context) error {
			if nc.Status() != nats.CONNECTED {
				return fmt.Errorf("nats %s", nc.Status())
			}
			_, err := js.AccountInfo(ctx)
			return err
		}},
		{Name: "temporal", Check: func(ctx context.Context) error {
			_, err := tc.CheckHealth(ctx, &client.CheckHealthRequest{})
			return err
		}},
	}
}

// dialTemporal retries until the frontend and its default namespace answer.
func dialTemporal(ctx context.Context, addr string, lg *slog.Logger) (client.Client, error) {
	// One client for settlement and payout: their workflows and activities
	// are traced through it (see settlement.TemporalInterceptors).
	traced, err := settlement.TemporalInterceptors()
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(temporalDialWithin)
	var lastErr error
	for time.Now().Before(deadline) {
		c, err := client.DialContext(ctx, client.Options{HostPort: addr, Namespace: "default",
			Logger:       log.NewStructuredLogger(lg.With("component", "temporal")),
			Interceptors: traced,
			// Loopback or a LAN: gzip of every request costs CPU and saves nothing.
			ConnectionOptions: client.ConnectionOptions{GrpcCompression: &client.GrpcCompressionNone{}}})
		if err == nil {
			if _, err = c.CheckHealth(ctx, &client.CheckHealthRequest{}); err == nil {
				return c, nil
			}
			c.Close()
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return nil, fmt.Errorf("temporal at %s: %w", addr, lastErr)
}

func shutdownNATS(ns *server.Server) {
	ns.Shutdown()
	ns.WaitForShutdown()
}

func orDefault(v, d string) string {
	if v == "" {
		return d
	}
	return v
}

// Methods lists every RPC the stack's gRPC listener serves.
func (s *Stack) Methods() []string { return s.srv.Methods() }

// Err reports a listener or service failure.
func (s *Stack) Err() <-chan error { return s.runErr }

// Stop shuts everything down: listeners, background loops, then connections
// and embedded servers in reverse order of start.
func (s *Stack) Stop() {
	s.stopOnce.Do(func() {
		if s.srv != nil {
			s.srv.Shutdown(context.Background())
		}
		s.cancel()
		s.wg.Wait()
		for i := len(s.closers) - 1; i >= 0; i-- {
			s.closers[i]()
		}
	})
}
