package gctune

import (
	"errors"
	"math"
	"os"
	"runtime/debug"
	"testing"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// runtimeAsFound restores the collector's settings and the environment the
// test changes (not parallel: both are the process's).
func runtimeAsFound(t *testing.T) {
	t.Helper()
	percent := debug.SetGCPercent(100)
	debug.SetGCPercent(percent)
	limit := debug.SetMemoryLimit(-1)
	t.Cleanup(func() {
		debug.SetGCPercent(percent)
		debug.SetMemoryLimit(limit)
	})
	for _, k := range []string{"GOGC", "GOMEMLIMIT", "AUTOMEMLIMIT"} {
		if v, ok := os.LookupEnv(k); ok {
			t.Cleanup(func() { os.Setenv(k, v) }) //nolint:errcheck // restoring what was there
		} else {
			t.Cleanup(func() { os.Unsetenv(k) }) //nolint:errcheck // restoring what was there
		}
		os.Unsetenv(k) //nolint:errcheck // a plain unset
	}
}

func inForce() (int, int64) {
	p := debug.SetGCPercent(-1)
	debug.SetGCPercent(p)
	return p, debug.SetMemoryLimit(-1)
}

// A process that sets nothing runs at Percent under 90 % of its
// container's memory.
func TestApplySetsTargetAndLimit(t *testing.T) {
	runtimeAsFound(t)
	debug.SetGCPercent(100)
	debug.SetMemoryLimit(math.MaxInt64)
	s := apply(memlimit.Limit(1 << 30))
	gib := float64(1 << 30)
	want := int64(gib * memoryShare)
	if p, l := inForce(); s.Percent != Percent || p != Percent || s.MemoryLimit != want || l != want || s.LimitErr != nil {
		t.Fatalf("settings %+v, in force GOGC %d, limit %d; want %d and %d bytes", s, p, l, Percent, want)
	}
}

// GOGC and GOMEMLIMIT set by whoever runs the process are left as the
// runtime read them.
func TestApplyLeavesWhatIsSet(t *testing.T) {
	runtimeAsFound(t)
	os.Setenv("GOGC", "150")        //nolint:errcheck // restored by runtimeAsFound
	os.Setenv("GOMEMLIMIT", "2GiB") //nolint:errcheck // restored by runtimeAsFound
	debug.SetGCPercent(150)
	debug.SetMemoryLimit(2 << 30)
	s := apply(memlimit.Limit(1 << 30))
	if p, l := inForce(); s.Percent != 150 || p != 150 || s.MemoryLimit != 2<<30 || l != 2<<30 {
		t.Fatalf("settings %+v, in force GOGC %d, limit %d; want 150 and 2 GiB", s, p, l)
	}
}

// Without a container limit the target still applies; the reason no limit
// was read is reported, not fatal.
func TestApplyWithoutContainerLimit(t *testing.T) {
	runtimeAsFound(t)
	debug.SetGCPercent(100)
	debug.SetMemoryLimit(math.MaxInt64)
	s := apply(func() (uint64, error) { return 0, memlimit.ErrNoLimit })
	if s.Percent != Percent || s.MemoryLimit != math.MaxInt64 || s.LimitErr != nil {
		t.Fatalf("no limit: %+v", s)
	}
	unreadable := errors.New("no memory controller")
	s = apply(func() (uint64, error) { return 0, unreadable })
	if p, l := inForce(); s.Percent != Percent || p != Percent || l != math.MaxInt64 || !errors.Is(s.LimitErr, unreadable) {
		t.Fatalf("unreadable limit: %+v, in force GOGC %d, limit %d", s, p, l)
	}
	if got := s.Attrs(); len(got) != 4 || got[2] != "memory_limit_unset" {
		t.Fatalf("attrs %v, want the reason logged", got)
	}
}
