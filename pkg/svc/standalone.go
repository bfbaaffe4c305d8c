package svc

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"

	"github.com/alecthomas/kong"

	"github.com/gpubill/gpubill/pkg/audit"
	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/cmdline"
	"github.com/gpubill/gpubill/pkg/config"
	"github.com/gpubill/gpubill/pkg/deadletter"
	"github.com/gpubill/gpubill/pkg/gctune"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/obs"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/server"
)

// StandalonePoolConns bounds one standalone service's database pool (the
// chart sizes PostgreSQL's max_connections by it).
const StandalonePoolConns = 16

// Builder makes a service from its dependencies and the parsed config (for
// anything service-specific, such as settlement's Temporal client). Extra
// resources are released by the returned cleanup function.
type Builder func(ctx context.Context, d Deps, cfg config.Common) (Service, func(), error)

// Main runs one service alone: config from env and flags (DESIGN §10), its
// database pool, NATS (NATS_URL is required), its gRPC and REST listeners,
// and its background loops, until SIGINT, SIGTERM or SIGHUP
// (cmdline.StopSignals). It returns the exit code.
// --help and --version print and return 0 before anything starts; a
// command line or setting that does not parse returns 2.
func Main(name string, build Builder) int {
	var cfg struct {
		config.Common
		Version kong.VersionFlag `help:"Print the version and exit."`
	}
	if _, code, done := cmdline.Parse(name, &cfg, os.Args[1:], os.Stdout, os.Stderr,
		kong.Description("gpubill "+name+" service. "+cmdline.ExitCodesHelp)); done {
		return code
	}
	ctx, stop := cmdline.StopContext(context.Background())
	defer stop()
	log := obs.NewLogger(os.Stderr, cfg.LogLevel).With("service", name)
	err := run(ctx, name, cfg.Common, build)
	if err != nil {
		log.Error("exit", "err", err)
	}
	return cmdline.Code(err)
}

func run(ctx context.Context, name string, cfg config.Common, build Builder) error {
	log := obs.NewLogger(os.Stderr, cfg.LogLevel).With("service", name)
	gctune.Apply().Log(log)
	shutdownTracing, err := obs.SetupTracing(ctx, name, log)
	if err != nil {
		return err
	}
	// Last out: the spans of the shutdown itself are flushed too.
	defer func() {
		if err := shutdownTracing(context.Background()); err != nil {
			log.Warn("spans not exported at exit", "err", err)
		}
	}()
	st, err := readSettings(cfg)
	if err != nil {
		return cmdline.UsageError{Err: err}
	}
	pool, err := pg.Open(ctx, cfg.DatabaseURL, StandalonePoolConns)
	if err != nil {
		return err
	}
	defer pool.Close()
	nc, js, err := natsx.Connect(cfg.NatsURL, "gpubill-"+name)
	if err != nil {
		return err
	}
	defer nc.Drain()
	if err := st.deps.Streams.EnsureStreams(ctx, js, log, natsx.StreamAudit); err != nil {
		return err
	}
	internal, err := NewInternalRouter(st.secret, cfg.GRPCAddr, name)
	if err != nil {
		return err
	}
	defer internal.Close()
	deps := st.deps
	deps.Pool, deps.JS, deps.Log, deps.Clock, deps.Internal = pool, js, log, clock.System{}, internal
	s, cleanup, err := build(ctx, deps, cfg)
	if err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	if cleanup != nil {
		defer cleanup()
	}
	defer ServeMetrics(pool, js, log, s)()
	srv, err := server.Start(ctx, server.Options{
		GRPCAddr: cfg.GRPCAddr, HTTPAddr: cfg.HTTPAddr, Secret: st.secret, Log: log,
		// Its dead letters (GET /v1/ops/dead-letters): the schema is the service's name.
		Services: []server.Service{s, deadletter.NewServer(deadletter.New(pool, name, log))},
		Allow:    st.allow, TrustedProxies: st.proxies,
		AllAPIDocs: cfg.APIDocs == "all",
		Audit:      audit.New(audit.PoolStore{Pool: pool}, log, name),
		Ready:      readiness(pool.Ping, func(ctx context.Context) error { _, err := js.AccountInfo(ctx); return err }, s),
	})
	if err != nil {
		return err
	}
	defer srv.Shutdown(context.Background())
	log.Info("serving", "grpc", srv.GRPCAddr, "http", srv.HTTPAddr)
	return serveUntilDone(ctx, srv, s)
}

// ReadyChecker is a Service with readiness checks of its own (payout's and
// settlement's Temporal frontend): /readyz adds them (DESIGN §7: database,
// NATS, Temporal reachable).
type ReadyChecker interface {
	ReadyChecks() []server.Check
}

// readiness is a service's /readyz checks: the database, NATS, and its own.
func readiness(db, nats func(context.Context) error, s Service) []server.Check {
	checks := []server.Check{{Name: "database", Check: db}, {Name: "nats", Check: nats}}
	if rc, ok := s.(ReadyChecker); ok {
		checks = append(checks, rc.ReadyChecks()...)
	}
	return checks
}

// standaloneSettings is what run reads from the config before it connects
// to anything: deps holds the calendars, commission and stream limits.
type standaloneSettings struct {
	deps    Deps
	secret  []byte
	allow   auth.Allowlist
	proxies []netip.Prefix
}

// readSettings checks and parses the settings a service alone needs.
func readSettings(cfg config.Common) (standaloneSettings, error) {
	var st standaloneSettings
	var err error
	if cfg.NatsURL == "" {
		return st, errors.New("NATS_URL is required when a service runs alone (gpubill dev embeds NATS)")
	}
	if cfg.AuthSecret == "" {
		return st, errors.New("GPUBILL_AUTH_SECRET is required when a service runs alone (all services must share it)")
	}
	if st.deps.Calendar, err = cfg.Calendar(); err != nil {
		return st, err
	}
	if st.deps.TaxPeriods, err = cfg.TaxPeriods(); err != nil {
		return st, err
	}
	if st.deps.Streams, err = cfg.StreamLimits(); err != nil {
		return st, err
	}
	if st.deps.Commission, err = cfg.Commission(); err != nil {
		return st, err
	}
	if st.deps.LateArrival, err = cfg.LateArrival(); err != nil {
		return st, err
	}
	st.secret = []byte(cfg.AuthSecret)
	if err := auth.CheckSecret(st.secret); err != nil {
		return st, err
	}
	if st.allow, err = cfg.Allowlist(); err != nil {
		return st, err
	}
	if st.proxies, err = cfg.Proxies(); err != nil {
		return st, err
	}
	return st, nil
}

// serveUntilDone runs the service's background loops until ctx ends (then
// stops the server first, the loops second) or the server or the loops fail.
func serveUntilDone(ctx context.Context, srv *server.Server, s Service) error {
	runErr := make(chan error, 1)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { runErr <- s.Run(runCtx) }()
	select {
	case <-ctx.Done():
		srv.Shutdown(context.Background())
		cancel()
		return stopped(ctx, <-runErr)
	case err := <-srv.Err():
		return err
	case err := <-runErr:
		return stopped(ctx, err)
	}
}

// stopped is the loops' result err once ctx may have ended: a start-up
// step the stop interrupted (settlement starting its cycle workflows, each
// start idempotent and run again at the next start) returns the context's
// error, and a drain asked for exited 1 with an error logged.
func stopped(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
