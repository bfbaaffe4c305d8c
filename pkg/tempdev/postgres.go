package tempdev

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"text/template"
)

// Postgres is where a Temporal server keeps its state on PostgreSQL: the
// server (Host:Port, User, Password) and its two databases, one for
// persistence and one for visibility.
type Postgres struct {
	Host, User, Password string
	Port                 int
	Database             string // persistence (executions, history, task queues, …)
	VisibilityDatabase   string // SQL visibility (executions_visibility)
	// HistoryShards is fixed for the life of the databases (Temporal
	// refuses to start on a store made with another count). 0: 4.
	HistoryShards int
	// MaxConns is the persistence pool's size; visibility gets half.
	// 0: 10 (the server is often shared: its max_connections counts).
	MaxConns int
}

func (pg Postgres) maxConns() int {
	if pg.MaxConns == 0 {
		return 10
	}
	return pg.MaxConns
}

// HistoryShardCount is the number of history shards a server on pg runs.
func (pg Postgres) HistoryShardCount() int { return pg.shards() }

func (pg Postgres) shards() int {
	if pg.HistoryShards == 0 {
		return 4
	}
	return pg.HistoryShards
}

// SQLTool runs `temporal gpubill-sql-tool` (upstream's temporal-sql-tool)
// against pg's server with the postgres12 plugin on database db, e.g.
// SQLTool(ctx, bin, pg, db, w, "setup-schema", "-v", "0.0").
func SQLTool(ctx context.Context, bin string, pg Postgres, db string, logw io.Writer, args ...string) error {
	full := append([]string{"gpubill-sql-tool", "--ep", pg.Host, "--port", strconv.Itoa(pg.Port),
		"--user", pg.User, "--password", pg.Password, "--plugin", "postgres12", "--db", db}, args...)
	cmd := exec.CommandContext(ctx, bin, full...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if logw != nil {
		if _, werr := logw.Write(out.Bytes()); werr != nil {
			err = errors.Join(err, fmt.Errorf("write the tool's output to its log: %w", werr))
		}
	}
	if err != nil {
		return fmt.Errorf("temporal gpubill-sql-tool --db %s %v: %w\n%s", db, args, err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}

// SetupPostgres creates pg's two databases and sets up Temporal's schema in
// them with Temporal's own tool, the way its documentation does it: create
// the database, set up the versioning tables at 0.0, then update to the
// newest embedded schema (postgresql/v12/temporal, postgresql/v12/visibility).
func SetupPostgres(ctx context.Context, bin string, pg Postgres, logw io.Writer) error {
	for _, d := range []struct{ db, schema string }{
		{pg.Database, "postgresql/v12/temporal"},
		{pg.VisibilityDatabase, "postgresql/v12/visibility"},
	} {
		for _, args := range [][]string{
			{"create-database"},
			{"setup-schema", "-v", "0.0"},
			{"update-schema", "--schema-name", d.schema},
		} {
			if err := SQLTool(ctx, bin, pg, d.db, logw, args...); err != nil {
				return err
			}
		}
	}
	return nil
}

// ServerDynamicConfig is what a gpubill-server started by StartPostgres
// runs with: DynamicConfig plus the values the CLI's dev server sets on top
// of Temporal's defaults (its persistence rate limits and history cache), so
// that the dev server and the PostgreSQL server differ in their store only.
func ServerDynamicConfig() map[string]string {
	m := map[string]string{
		"frontend.persistenceMaxQPS":       "10000",
		"history.persistenceMaxQPS":        "45000",
		"history.hostLevelCacheMaxSize":    "8096",
		"frontend.namespaceRPS.visibility": "100",
	}
	for k, v := range DynamicConfig {
		m[k] = v
	}
	return m
}

var serverConfig = template.Must(template.New("config").Parse(`# gpubill-server on PostgreSQL (written by pkg/tempdev)
log:
  stdout: true
  level: {{.LogLevel}}
persistence:
  defaultStore: postgres-default
  visibilityStore: postgres-visibility
  numHistoryShards: {{.Shards}}
  datastores:
    postgres-default:
      sql:
        pluginName: postgres12
        databaseName: {{.PG.Database}}
        connectAddr: {{.PGAddr}}
        connectProtocol: tcp
        user: {{.PG.User}}
        password: "{{.PG.Password}}"
        maxConns: {{.Conns}}
        maxIdleConns: {{.Conns}}
        maxConnLifetime: 1h
    postgres-visibility:
      sql:
        pluginName: postgres12
        databaseName: {{.PG.VisibilityDatabase}}
        connectAddr: {{.PGAddr}}
        connectProtocol: tcp
        user: {{.PG.User}}
        password: "{{.PG.Password}}"
        maxConns: {{.VisConns}}
        maxIdleConns: {{.VisConns}}
        maxConnLifetime: 1h
global:
  membership:
    maxJoinDuration: 30s
    broadcastAddress: {{.IP}}
services:
  frontend:
    rpc:
      grpcPort: {{.Frontend}}
      httpPort: {{.HTTP}}
      bindOnIP: {{.IP}}
  history:
    rpc:
      grpcPort: {{.History}}
      bindOnIP: {{.IP}}
  matching:
    rpc:
      grpcPort: {{.Matching}}
      bindOnIP: {{.IP}}
  worker:
    rpc:
      grpcPort: {{.Worker}}
      bindOnIP: {{.IP}}
clusterMetadata:
  enableGlobalNamespace: false
  failoverVersionIncrement: 10
  masterClusterName: active
  currentClusterName: active
  clusterInformation:
    active:
      enabled: true
      initialFailoverVersion: 1
      rpcName: frontend
      rpcAddress: {{.IP}}:{{.Frontend}}
      httpAddress: {{.IP}}:{{.HTTP}}
dcRedirectionPolicy:
  policy: noop
archival:
  history:
    state: disabled
  visibility:
    state: disabled
namespaceDefaults:
  archival:
    history:
      state: disabled
    visibility:
      state: disabled
publicClient:
  hostPort: {{.IP}}:{{.Frontend}}
`))

// PostgresConfig is a gpubill-server configuration on pg with its four
// services on free ports of ip, the frontend on frontendPort (0: a free
// one). It returns the YAML and the frontend's address.
func PostgresConfig(pg Postgres, ip string, frontendPort int, logLevel string) ([]byte, string, error) {
	ports := make([]int, 5)
	for i := range ports {
		p, err := FreePort()
		if err != nil {
			return nil, "", err
		}
		ports[i] = p
	}
	if frontendPort != 0 {
		ports[0] = frontendPort
	}
	var b bytes.Buffer
	err := serverConfig.Execute(&b, map[string]any{
		"PG": pg, "PGAddr": net.JoinHostPort(pg.Host, strconv.Itoa(pg.Port)), "Shards": pg.shards(),
		"Conns": pg.maxConns(), "VisConns": max(1, pg.maxConns()/2),
		"IP": ip, "Frontend": ports[0], "HTTP": ports[1], "History": ports[2], "Matching": ports[3], "Worker": ports[4],
		"LogLevel": logLevel,
	})
	if err != nil {
		return nil, "", err
	}
	return b.Bytes(), net.JoinHostPort(ip, strconv.Itoa(ports[0])), nil
}

// StartServer runs `temporal gpubill-server --config configFile` (the
// namespace default registered, ServerDynamicConfig) and waits until our
// child listens on frontend (host:port, as in the config). The child dies
// with the parent.
func StartServer(ctx context.Context, bin, configFile, frontend string, logw io.Writer) (*Server, error) {
	_, port, err := net.SplitHostPort(frontend)
	if err != nil {
		return nil, fmt.Errorf("temporal frontend %q: %w", frontend, err)
	}
	if _, err := os.Stat(configFile); err != nil {
		return nil, err
	}
	args := []string{"gpubill-server", "--config", configFile, "--namespace", "default"}
	dyn := ServerDynamicConfig()
	keys := make([]string, 0, len(dyn))
	for k := range dyn {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "--dynamic-config-value", k+"="+dyn[k])
	}
	return startProcess(ctx, bin, args, frontend, port, logw)
}
