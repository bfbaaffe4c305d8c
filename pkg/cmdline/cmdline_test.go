package cmdline

import (
	"bytes"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
)

type grammar struct {
	Version kong.VersionFlag
	Serve   struct {
		Addr string `required:""`
	} `cmd:""`
}

// Help and version end the run (done, 0) before validation: `serve --help`
// has no --addr yet must not fail on it, and nothing is left to run.
// A parse error is done with 2.
func TestParse(t *testing.T) {
	tests := []struct {
		give       []string
		wantDone   bool
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{give: []string{"serve", "--help"}, wantDone: true, wantCode: 0, wantStdout: "Usage: prog serve --addr=STRING"},
		{give: []string{"-h"}, wantDone: true, wantCode: 0, wantStdout: "Usage: prog <command>"},
		{give: []string{"serve", "--version"}, wantDone: true, wantCode: 0, wantStdout: "prog "},
		{give: []string{"serve"}, wantDone: true, wantCode: 2, wantStderr: "prog: error: missing flags: --addr=STRING"},
		{give: []string{"nope"}, wantDone: true, wantCode: 2, wantStderr: "prog: error: unexpected argument nope"},
		{give: []string{"serve", "--addr", ":1"}, wantDone: false, wantCode: 0},
	}
	for _, tt := range tests {
		var g grammar
		var stdout, stderr bytes.Buffer
		kctx, code, done := Parse("prog", &g, tt.give, &stdout, &stderr)
		if done != tt.wantDone || code != tt.wantCode || (kctx == nil) != done ||
			!strings.HasPrefix(stdout.String(), tt.wantStdout) || !strings.HasPrefix(stderr.String(), tt.wantStderr) {
			t.Errorf("%v: done %t code %d, stdout %q, stderr %q; want done %t code %d, stdout %q…, stderr %q…",
				tt.give, done, code, stdout.String(), stderr.String(), tt.wantDone, tt.wantCode, tt.wantStdout, tt.wantStderr)
		}
	}
}

func TestBuildText(t *testing.T) {
	in := Info{Version: "v1.2.3", Commit: "abc", CommitTime: "2026-01-02T03:04:05Z", Modified: true, GoVersion: "go1.26.8"}
	if got, want := in.Line("gpubill"), "gpubill v1.2.3 (commit abc (modified), 2026-01-02T03:04:05Z, go1.26.8)"; got != want {
		t.Errorf("Line: %q, want %q", got, want)
	}
	if b := Build(); b.Version == "" || b.Commit == "" || b.CommitTime == "" || !strings.HasPrefix(b.GoVersion, "go") {
		t.Errorf("Build() left a field empty: %+v", b)
	}
}
