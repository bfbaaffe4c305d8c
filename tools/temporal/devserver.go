package main

import (
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"

	"github.com/gpubill/gpubill/tools/temporal/stmtcache"

	"github.com/google/uuid"
	"github.com/temporalio/cli/temporalcli/devserver"
	"go.temporal.io/server/common/config"
	sqliteplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/sqlite"
	sqliteschema "go.temporal.io/server/schema/sqlite"
)

// What gpubill-dev-server does differently from `temporal server start-dev`,
// each against a cost the settlement benchmark's profiles show (the figures
// are in DEVELOPERS.md, "Settlement on Temporal"):
//
//   - Visibility: the SQLite visibility table carries ~45 indexes (one per
//     system and pre-allocated custom search attribute) and two FTS5 tables
//     kept by triggers; every workflow start inserts the row and every close
//     REPLACEs it (a delete and an insert through all of them). gpubill
//     registers no search attributes and lists workflows by id, type,
//     status, time or parent only, so the other indexes and the FTS
//     triggers are dropped (search by text or keyword list attributes then
//     finds nothing; everything else works).
//   - Prepared statements are kept per SQLite connection (stmtcache/):
//     the SQLite plugin runs every statement unprepared and the driver
//     would compile each one anew. The same wrapper runs the server's read
//     of a page of timer tasks with the lower bound on the key that its OR
//     implies (SQLite otherwise scans every timer of the shard below the
//     page on each read, a cost that grew with a long cycle's close).
//   - No Prometheus metrics unless -metrics-port is given (the CLI always
//     turns them on; tally's tagging showed in the profile).
//   - The Go collector runs at GOGC=400 unless GOGC is set (the heap stays
//     small next to the machine's RAM, and collecting at the default pace
//     costs a noticeable share of the server's CPU).
//   - Without -db-filename the store is a file in a RAM-backed temporary
//     directory (the schema has to exist before the server starts, which the
//     CLI's in-memory mode does not allow), removed at exit; files left by a
//     killed server are removed by the next start.
//
// Everything else (services, namespaces, dynamic config defaults) is the
// CLI's devserver package.

// Visibility indexes kept: the ones behind the list filters gpubill, the UI
// and Temporal's own system workflows (schedules, batch jobs) use.
var keptVisibilityIndexes = map[string]bool{
	"default_idx":                    true,
	"by_execution_time":              true,
	"by_workflow_id":                 true,
	"by_workflow_type":               true,
	"by_status":                      true,
	"by_parent_workflow_id":          true,
	"by_temporal_namespace_division": true,
}

// Dynamic config defaults of the CLI's start-dev, kept here.
var cliDynamicConfig = map[string]any{
	"frontend.persistenceMaxQPS": 10000,
	"history.persistenceMaxQPS":  45000,
}

type kvFlag map[string]string

func (m kvFlag) String() string { return fmt.Sprint(map[string]string(m)) }
func (m kvFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want KEY=VALUE, got %q", s)
	}
	m[k] = v
	return nil
}

func devServer(args []string) int {
	fs := flag.NewFlagSet("gpubill-dev-server", flag.ContinueOnError)
	ip := fs.String("ip", "127.0.0.1", "IP address the frontend binds to")
	port := fs.Int("port", 7233, "frontend gRPC port")
	httpPort := fs.Int("http-port", 0, "frontend HTTP port (0: any free port)")
	dbFile := fs.String("db-filename", "", "SQLite file kept across restarts (default: a temporary file removed at exit)")
	logLevel := fs.String("log-level", "warn", "debug, info, warn or error")
	metricsPort := fs.Int("metrics-port", 0, "Prometheus metrics port (0: no metrics)")
	pprofPort := fs.Int("pprof-port", 0, "Go pprof port (0: off)")
	var namespaces []string
	fs.Func("namespace", "namespace to create (repeatable; default always created)", func(s string) error {
		namespaces = append(namespaces, s)
		return nil
	})
	dyn := kvFlag{}
	fs.Var(dyn, "dynamic-config-value", "dynamic config KEY=JSON (repeatable)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(os.Stderr, "gpubill-dev-server: log level %q: %v\n", *logLevel, err)
		return 2
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if err := runDevServer(logger, level, *ip, *port, *httpPort, *dbFile, *metricsPort, *pprofPort, namespaces, dyn); err != nil {
		logger.Error("gpubill-dev-server", "err", err)
		return 1
	}
	return 0
}

func runDevServer(logger *slog.Logger, level slog.Level, ip string, port, httpPort int, dbFile string, metricsPort, pprofPort int, namespaces []string, dyn map[string]string) error {
	if err := stmtcache.Install(); err != nil {
		return err
	}
	dynamic := map[string]any{}
	for k, v := range cliDynamicConfig {
		dynamic[k] = v
	}
	for k, raw := range dyn {
		v, err := jsonValue(raw)
		if err != nil {
			return fmt.Errorf("dynamic config %s: %w", k, err)
		}
		dynamic[k] = v
	}
	pragmas := map[string]string{"journal_mode": "wal", "synchronous": "normal"}
	if dbFile == "" {
		dir := tempDir()
		removeStaleFiles(dir)
		dbFile = filepath.Join(dir, fmt.Sprintf("gpubill-temporal-%d.db", os.Getpid()))
		defer removeDB(dbFile)
		// A throw-away store on a RAM disk: nothing to make durable.
		pragmas = map[string]string{"journal_mode": "memory", "synchronous": "off"}
	}
	if err := prepareStore(dbFile); err != nil {
		return err
	}
	srv, err := devserver.Start(devserver.StartOptions{
		FrontendIP:             ip,
		FrontendPort:           port,
		FrontendHTTPPort:       httpPort,
		Namespaces:             append([]string{"default"}, namespaces...),
		ClusterID:              uuid.NewString(),
		MasterClusterName:      "active",
		CurrentClusterName:     "active",
		InitialFailoverVersion: 1,
		Logger:                 logger,
		LogLevel:               level,
		DatabaseFile:           dbFile,
		SqlitePragmas:          pragmas,
		MetricsPort:            metricsPort,
		PProfPort:              pprofPort,
		DynamicConfigValues:    dynamic,
	})
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	fmt.Printf("gpubill-dev-server: frontend %s:%d, store %s\n", ip, port, dbFile)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	srv.Stop()
	return nil
}

// prepareStore creates the SQLite schema in dbFile when the file is new and
// trims the visibility indexes and FTS triggers (idempotent).
func prepareStore(dbFile string) error {
	if _, err := os.Stat(dbFile); errors.Is(err, os.ErrNotExist) {
		conf := config.SQL{PluginName: sqliteplugin.PluginName, DatabaseName: dbFile, ConnectAttributes: map[string]string{"mode": "rwc"}}
		if err := sqliteschema.SetupSchema(&conf); err != nil {
			return fmt.Errorf("schema of %s: %w", dbFile, err)
		}
	}
	db, err := sql.Open("sqlite", "file:"+dbFile+"?mode=rw")
	if err != nil {
		return err
	}
	defer db.Close()
	rows, err := db.Query(`select type, name from sqlite_master where tbl_name = 'executions_visibility' and type in ('index', 'trigger') and sql is not null`)
	if err != nil {
		return fmt.Errorf("visibility schema: %w", err)
	}
	var drops []string
	for rows.Next() {
		var typ, name string
		if err := rows.Scan(&typ, &name); err != nil {
			rows.Close()
			return err
		}
		if typ == "trigger" || !keptVisibilityIndexes[name] {
			drops = append(drops, fmt.Sprintf("drop %s if exists %q", typ, name))
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, d := range drops {
		if _, err := db.Exec(d); err != nil {
			return fmt.Errorf("%s: %w", d, err)
		}
	}
	return nil
}

// jsonValue decodes a dynamic config value the way the CLI does: JSON
// numbers become int when integral (dynamic config wants int), else float.
func jsonValue(raw string) (any, error) {
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if n, ok := v.(json.Number); ok {
		if i, err := n.Int64(); err == nil {
			return int(i), nil
		}
		return n.Float64()
	}
	return v, nil
}

// tempDir is a RAM-backed directory when the machine has one.
func tempDir() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if f, err := os.CreateTemp("/dev/shm", "gpubill-probe-*"); err == nil {
			f.Close()
			os.Remove(f.Name())
			return "/dev/shm"
		}
	}
	return os.TempDir()
}

// removeStaleFiles removes the stores of dev servers that died without
// cleaning up (killed with SIGKILL when their parent exited).
func removeStaleFiles(dir string) {
	paths, _ := filepath.Glob(filepath.Join(dir, "gpubill-temporal-*.db"))
	for _, p := range paths {
		pid, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(p), "gpubill-temporal-"), ".db"))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			removeDB(p)
		}
	}
}

func removeDB(p string) {
	for _, suffix := range []string{"", "-journal", "-wal", "-shm"} {
		_ = os.Remove(p + suffix)
	}
}
