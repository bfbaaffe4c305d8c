// Package cmdline is what every gpubill binary's command line shares: kong
// parsing in which --help, --version and a completion request end the run
// before anything starts, the exit codes, and the build's version.
package cmdline

import (
	"errors"
	"fmt"
	"io"

	"github.com/alecthomas/kong"
)

// Exit codes of every gpubill binary.
const (
	ExitOK     = 0 // the command did what was asked
	ExitFailed = 1 // the command failed (e.g. ledger verify found a broken chain)
	ExitUsage  = 2 // the command line or a setting could not be parsed
)

// UsageError is a flag or setting value refused after the command line
// parsed (a value out of range, a role, a currency): exit ExitUsage, as one
// the parser refuses. Settings refused at start-up exited 1, "failed".
type UsageError struct{ Err error }

func (u UsageError) Error() string { return u.Err.Error() }
func (u UsageError) Unwrap() error { return u.Err }

// Code is the exit code of a command's result: ExitOK for nil, ExitUsage
// for an error wrapping a UsageError, ExitFailed for any other.
func Code(err error) int {
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, new(UsageError)):
		return ExitUsage
	}
	return ExitFailed
}

// ExitCodesHelp documents the exit codes in --help.
const ExitCodesHelp = "Exit codes: 0 ok; 1 the command failed; 2 usage error (unknown command or flag, bad value)."

// exitRequest is what kong's exit hook panics with: kong calls its exit
// function after printing the help (or the version) and, if that function
// returns, goes on parsing and the caller would run the command. Unwinding
// stops it where it is.
type exitRequest int

// Parse builds a kong parser for grammar (named name) and parses args.
// When done is true the run is over, nothing was started, and code is the
// exit status: the help or the version was printed (0), a completion
// request was answered, or the command line could not be parsed (2, the
// error on stderr). Otherwise run the returned context. A grammar offers
// --version with a kong.VersionFlag field; its text is Build().Line(name).
// Nothing here calls os.Exit.
func Parse(name string, grammar any, args []string, stdout, stderr io.Writer, options ...kong.Option) (kctx *kong.Context, code int, done bool) {
	defer func() {
		if r := recover(); r != nil {
			req, ok := r.(exitRequest)
			if !ok {
				panic(r)
			}
			kctx, code, done = nil, int(req), true
		}
	}()
	opts := append([]kong.Option{
		kong.Name(name),
		kong.Writers(stdout, stderr),
		kong.Exit(func(code int) { panic(exitRequest(code)) }),
		kong.Vars{"version": Build().Line(name)},
	}, options...)
	parser, err := kong.New(grammar, opts...)
	if err != nil { // a grammar that does not build is the program's fault
		fmt.Fprintf(stderr, "%s: %v\n", name, err) //nolint:errcheck // stderr: the exit code carries the failure
		return nil, ExitFailed, true
	}
	kctx, err = parser.Parse(args)
	if err != nil {
		fmt.Fprintf(stderr, "%s: error: %v\nRun \"%s --help\" for usage.\n", name, err, name) //nolint:errcheck // stderr: the exit code carries the failure
		return nil, ExitUsage, true
	}
	return kctx, ExitOK, false
}
