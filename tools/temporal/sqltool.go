package main

import (
	"fmt"
	"os"

	sqltool "go.temporal.io/server/tools/sql"
)

// sqlTool is upstream's temporal-sql-tool (go.temporal.io/server/tools/sql)
// as `temporal gpubill-sql-tool`: it creates Temporal's databases and sets
// up or updates their schema from the schemas embedded in the server
// module (--schema-name postgresql/v12/temporal, postgresql/v12/visibility),
// the same versions the server in this binary expects. Every flag and
// command is upstream's (`temporal gpubill-sql-tool --help`).
func sqlTool(args []string) int {
	if err := sqltool.RunTool(append([]string{"temporal gpubill-sql-tool"}, args...)); err != nil {
		fmt.Fprintf(os.Stderr, "gpubill-sql-tool: %v\n", err)
		return 1
	}
	return 0
}
