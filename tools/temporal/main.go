// Command temporal is the Temporal CLI (github.com/temporalio/cli v1.5.1)
// with three more commands:
//
//   - `temporal gpubill-dev-server`: the development server gpubill's
//     `make run` and its settlement tests start as a child process, tuned
//     for settlement's close (one child workflow per provider);
//   - `temporal gpubill-server --config FILE`: a Temporal server (all four
//     services in one process) on the persistence and visibility its config
//     names — PostgreSQL in gpubill's tests and benchmark (server.go);
//   - `temporal gpubill-sql-tool …`: upstream's temporal-sql-tool, which
//     creates those databases and sets up their schema (sqltool.go).
//
// Every other command is the upstream CLI, unchanged.
//
// It lives in its own module (built with GOWORK=off) so the Temporal
// server's dependency graph never enters the workspace or any other test
// binary.
package main

import (
	"context"
	"os"

	"github.com/temporalio/cli/temporalcli"

	// gpubill-server and gpubill-sql-tool speak PostgreSQL (postgres12).
	_ "go.temporal.io/server/common/persistence/sql/sqlplugin/postgresql"
	// The CLI pins this sqlite driver version; keep it.
	_ "modernc.org/sqlite"
	// Embedded time zone database as a fallback.
	_ "time/tzdata"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "gpubill-dev-server":
			os.Exit(devServer(os.Args[2:]))
		case "gpubill-server":
			os.Exit(server(os.Args[2:]))
		case "gpubill-sql-tool":
			os.Exit(sqlTool(os.Args[2:]))
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	temporalcli.Execute(ctx, temporalcli.CommandOptions{})
}
