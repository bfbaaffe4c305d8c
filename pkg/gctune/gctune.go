// Package gctune sets the Go garbage collector of a gpubill process: a
// target of Percent (GOGC=400, Go's default is 100) under a soft memory
// limit at 90 % of the container's memory (its cgroup's limit, read by
// github.com/KimMachineGun/automemlimit). The services allocate tens of
// kilobytes per request and keep a small live heap, so at Go's default the
// collector ran often: with the higher target the pipeline, ledger_postings
// and ledger_api benchmark figures took ~6 % less of the machine's CPU per
// item (DEVELOPERS.md, "The collector's target"), for about twice the peak
// memory. The soft limit is what keeps
// that bounded: near it the collector runs as often as it must, whatever
// the target.
//
// GOGC and GOMEMLIMIT, when set, win (AUTOMEMLIMIT sets the limit's share
// of the container's memory; "off" sets no limit).
package gctune

import (
	"log/slog"
	"math"
	"os"
	"runtime/debug"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// Percent is the collector's target (GOGC) of a gpubill process that does
// not set GOGC.
const Percent = 400

// memoryShare is the share of the container's memory the soft limit takes.
const memoryShare = 0.9

// Settings are the collector's settings in force after Apply.
type Settings struct {
	Percent     int   // the target (GOGC); -1 when the collector is off
	MemoryLimit int64 // the soft limit in bytes; math.MaxInt64 when none
	// LimitErr is why no container limit was read (no cgroup memory
	// controller here, an unreadable limit); the process runs without a
	// soft limit then.
	LimitErr error
}

// Apply sets the collector for a gpubill process (Percent unless GOGC is
// set; a soft limit at 90 % of the container's memory unless GOMEMLIMIT is
// set) and returns the settings in force.
func Apply() Settings { return apply(memlimit.FromCgroup) }

// apply is Apply with the container's memory limit read from limit.
func apply(limit memlimit.Provider) Settings {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(Percent)
	}
	var s Settings
	s.MemoryLimit, s.LimitErr = memlimit.Set(memlimit.WithRatio(memoryShare), memlimit.WithProvider(limit))
	s.Percent = debug.SetGCPercent(-1)
	debug.SetGCPercent(s.Percent)
	return s
}

// Attrs are the settings as log attributes.
func (s Settings) Attrs() []any {
	attrs := []any{"gogc", s.Percent}
	if s.MemoryLimit != math.MaxInt64 {
		attrs = append(attrs, "memory_limit_bytes", s.MemoryLimit)
	}
	if s.LimitErr != nil {
		attrs = append(attrs, "memory_limit_unset", s.LimitErr.Error())
	}
	return attrs
}

// Log logs the settings in force.
func (s Settings) Log(log *slog.Logger) { log.Info("go collector", s.Attrs()...) }
