package cmdline

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Set at link time by `make build` (-ldflags -X): the version (git
// describe), and the commit and its time for builds that carry no VCS
// stamp (go build stamps vcs.revision and vcs.time only in a plain git
// checkout, not in a git worktree or with -buildvcs=false).
var (
	version    = ""
	commit     = ""
	commitTime = ""
)

// Info is what a binary knows about its own build.
type Info struct {
	Version    string // -ldflags version, else the main module's version, else "dev"
	Commit     string // vcs.revision, else the -ldflags commit, else "unknown"
	CommitTime string // vcs.time (RFC 3339), else the -ldflags one, else "unknown"
	Modified   bool   // built from a tree with uncommitted changes (vcs.modified, else a -dirty version)
	GoVersion  string // the Go toolchain that built it
}

// Build reads the binary's build information (runtime/debug).
func Build() Info {
	in := Info{Version: version, Commit: commit, CommitTime: commitTime, GoVersion: runtime.Version()}
	stamped := false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if in.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			in.Version = bi.Main.Version
		}
		in.GoVersion = bi.GoVersion
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				in.Commit, stamped = s.Value, true
			case "vcs.time":
				in.CommitTime = s.Value
			case "vcs.modified":
				in.Modified = s.Value == "true"
			}
		}
	}
	if !stamped && strings.HasSuffix(in.Version, "-dirty") { // git describe --dirty
		in.Modified = true
	}
	if in.Version == "" {
		in.Version = "dev"
	}
	if in.Commit == "" {
		in.Commit = "unknown"
	}
	if in.CommitTime == "" {
		in.CommitTime = "unknown"
	}
	return in
}

// Line is the one-line form --version prints.
func (in Info) Line(name string) string {
	c := in.Commit
	if in.Modified {
		c += " (modified)"
	}
	return fmt.Sprintf("%s %s (commit %s, %s, %s)", name, in.Version, c, in.CommitTime, in.GoVersion)
}

// Text is the form `gpubill version` prints, a field a line.
func (in Info) Text(name string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s\n", name, in.Version)
	fmt.Fprintf(&b, "commit:      %s\n", in.Commit)
	fmt.Fprintf(&b, "modified:    %t\n", in.Modified)
	fmt.Fprintf(&b, "commit time: %s\n", in.CommitTime)
	fmt.Fprintf(&b, "go:          %s\n", in.GoVersion)
	fmt.Fprintf(&b, "platform:    %s/%s\n", runtime.GOOS, runtime.GOARCH)
	return b.String()
}
