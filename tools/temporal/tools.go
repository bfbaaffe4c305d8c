//go:build tools

// Package tools pins the Temporal CLI, whose dev server `gpubill dev` and the
// settlement integration tests run as a child process. It lives in its own
// module (built with GOWORK=off) so the Temporal server's dependency graph
// never enters the workspace or any other test binary.
package tools

import _ "github.com/temporalio/cli/cmd/temporal"
