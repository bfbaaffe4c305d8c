package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"syscall"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/server/common/authorization"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/dynamicconfig"
	"go.temporal.io/server/common/log"
	"go.temporal.io/server/common/log/tag"
	"go.temporal.io/server/common/membership/static"
	"go.temporal.io/server/common/primitives"
	"go.temporal.io/server/temporal"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"gopkg.in/validator.v2"
	"gopkg.in/yaml.v3"
)

// gpubill-server runs a Temporal server (temporal.NewServer, the server
// upstream's temporal-server runs) from one configuration file — typically
// PostgreSQL (plugin postgres12) for persistence and SQL visibility, its
// schema set up beforehand by `temporal gpubill-sql-tool`. All four services
// (frontend, history, matching, worker) run in this one process, found by
// each other at the config's services.*.rpc.grpcPort on the bind address
// (static membership: no ringpop, no membership ports). It registers the
// namespaces it is given (idempotently) once the frontend answers, so a
// fresh store is usable as soon as the server is.
//
// Differences from upstream's `temporal-server start`: one YAML file, not a
// config directory; dynamic config either from the file's
// dynamicConfigClient or from --dynamic-config-value flags, not both.
func server(args []string) int {
	fs := flag.NewFlagSet("gpubill-server", flag.ContinueOnError)
	configFile := fs.String("config", "", "Temporal server configuration (YAML, upstream's config.Config)")
	retention := fs.Duration("retention", 72*time.Hour, "workflow retention of the namespaces it registers")
	var namespaces []string
	fs.Func("namespace", "namespace to register if missing (repeatable; default: default)", func(s string) error {
		namespaces = append(namespaces, s)
		return nil
	})
	dyn := kvFlag{}
	fs.Var(dyn, "dynamic-config-value", "dynamic config KEY=JSON (repeatable)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *configFile == "" || fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: temporal gpubill-server --config FILE [--namespace NS]... [--dynamic-config-value KEY=JSON]...")
		return 2
	}
	if len(namespaces) == 0 {
		namespaces = []string{"default"}
	}
	if err := runServer(*configFile, namespaces, *retention, dyn); err != nil {
		fmt.Fprintf(os.Stderr, "gpubill-server: %v\n", err)
		return 1
	}
	return 0
}

// loadConfig reads and validates one configuration file the way upstream's
// config.Load reads each of its files.
func loadConfig(path string) (*config.Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var cfg config.Config
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := validator.Validate(&cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, s := range []primitives.ServiceName{primitives.FrontendService, primitives.HistoryService, primitives.MatchingService, primitives.WorkerService} {
		if cfg.Services[string(s)].RPC.GRPCPort == 0 {
			return nil, fmt.Errorf("%s: services.%s.rpc.grpcPort is required (all four services run in this process)", path, s)
		}
	}
	return &cfg, nil
}

func runServer(configFile string, namespaces []string, retention time.Duration, dyn map[string]string) error {
	cfg, err := loadConfig(configFile)
	if err != nil {
		return err
	}
	logger := log.NewZapLogger(log.BuildZapLogger(cfg.Log))

	var dc dynamicconfig.Client
	switch {
	case cfg.DynamicConfigClient != nil && len(dyn) > 0:
		return errors.New("dynamic config from both the config file (dynamicConfigClient) and --dynamic-config-value: choose one")
	case cfg.DynamicConfigClient != nil:
		dc, err = dynamicconfig.NewFileBasedClient(cfg.DynamicConfigClient, logger, temporal.InterruptCh())
		if err != nil {
			return fmt.Errorf("dynamic config: %w", err)
		}
	default:
		values := dynamicconfig.StaticClient{}
		for k, raw := range dyn {
			v, err := jsonValue(raw)
			if err != nil {
				return fmt.Errorf("dynamic config %s: %w", k, err)
			}
			values[dynamicconfig.Key(k)] = v
		}
		dc = values
	}

	authorizer, err := authorization.GetAuthorizerFromConfig(&cfg.Global.Authorization)
	if err != nil {
		return fmt.Errorf("authorizer: %w", err)
	}
	claimMapper, err := authorization.GetClaimMapperFromConfig(&cfg.Global.Authorization, logger)
	if err != nil {
		return fmt.Errorf("claim mapper: %w", err)
	}
	hosts := map[primitives.ServiceName]static.Hosts{}
	for _, s := range []primitives.ServiceName{primitives.FrontendService, primitives.HistoryService, primitives.MatchingService, primitives.WorkerService} {
		hosts[s] = static.SingleLocalHost(net.JoinHostPort(bindAddress(cfg, s), strconv.Itoa(cfg.Services[string(s)].RPC.GRPCPort)))
	}
	srv, err := temporal.NewServer(
		temporal.ForServices(temporal.DefaultServices),
		temporal.WithConfig(cfg),
		temporal.WithStaticHosts(hosts),
		temporal.WithDynamicConfigClient(dc),
		temporal.WithLogger(logger),
		temporal.WithAuthorizer(authorizer),
		temporal.WithClaimMapper(func(*config.Config) authorization.ClaimMapper { return claimMapper }),
	)
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	if err := srv.Start(); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	frontend := net.JoinHostPort(bindAddress(cfg, primitives.FrontendService), strconv.Itoa(cfg.Services[string(primitives.FrontendService)].RPC.GRPCPort))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	err = registerNamespaces(ctx, frontend, namespaces, retention)
	cancel()
	if err != nil {
		srv.Stop()
		return err
	}
	logger.Info("gpubill-server ready", tag.NewStringTag("frontend", frontend), tag.NewStringsTag("namespaces", namespaces))
	fmt.Printf("gpubill-server: frontend %s, persistence %s, visibility %s\n", frontend,
		storeName(cfg, cfg.Persistence.DefaultStore), storeName(cfg, cfg.Persistence.VisibilityStore))

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	srv.Stop()
	return nil
}

// bindAddress is where service s listens: its rpc.bindOnIP, else loopback
// when rpc.bindOnLocalHost, else 127.0.0.1 (a single-process server).
func bindAddress(cfg *config.Config, s primitives.ServiceName) string {
	rpc := cfg.Services[string(s)].RPC
	if rpc.BindOnIP != "" && rpc.BindOnIP != "0.0.0.0" && rpc.BindOnIP != "::" {
		return rpc.BindOnIP
	}
	return "127.0.0.1"
}

// storeName describes a datastore for the start-up line: plugin and database.
func storeName(cfg *config.Config, name string) string {
	ds, ok := cfg.Persistence.DataStores[name]
	if !ok || ds.SQL == nil {
		return name
	}
	return ds.SQL.PluginName + ":" + ds.SQL.DatabaseName
}

// registerNamespaces registers each namespace the frontend does not know
// yet, retrying while the frontend comes up.
func registerNamespaces(ctx context.Context, frontend string, namespaces []string, retention time.Duration) error {
	conn, err := grpc.NewClient(frontend, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("frontend %s: %w", frontend, err)
	}
	defer conn.Close()
	wf := workflowservice.NewWorkflowServiceClient(conn)
	sorted := append([]string(nil), namespaces...)
	sort.Strings(sorted)
	for _, ns := range sorted {
		for {
			callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := wf.RegisterNamespace(callCtx, &workflowservice.RegisterNamespaceRequest{
				Namespace:                        ns,
				WorkflowExecutionRetentionPeriod: durationpb.New(retention),
			})
			cancel()
			if err == nil || status.Code(err) == codes.AlreadyExists {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("register namespace %s: %w", ns, err)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}
