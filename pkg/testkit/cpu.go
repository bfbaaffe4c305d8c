package testkit

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// CPU is what a benchmark's work cost in CPU time: this process (user +
// system) and the PostgreSQL backends connected to its database. The
// machine is shared, so CPU per item compares two runs where wall-clock
// throughput does not.
type CPU struct {
	Process  time.Duration
	Postgres time.Duration
	// Missed counts the samples Run could not take (a backend that came
	// and went between two taken samples is not counted).
	Missed int
}

// CPUMeter reads the CPU of this process and of the backends of one
// database. Backends are read from /proc (the server runs on this machine):
// one there at Start counts from Start, one that appears later from its
// beginning; one that ends counts up to the last Sample that saw it, so
// sample (Run) often enough for the backends a pool opens and closes.
type CPUMeter struct {
	pool   *pgxpool.Pool
	db     string
	proc0  time.Duration
	first  map[int32]time.Duration // backend → CPU when first seen
	last   map[int32]time.Duration // backend → CPU when last seen
	missed int

	mu sync.Mutex // Run samples beside the caller's Used
}

// NewCPUMeter meters pool's database; Start begins the window.
func NewCPUMeter(pool *pgxpool.Pool) *CPUMeter {
	return &CPUMeter{pool: pool, first: map[int32]time.Duration{}, last: map[int32]time.Duration{}}
}

// Start begins the measured window: what the process and the backends used
// before it does not count.
func (m *CPUMeter) Start(ctx context.Context) error {
	if err := m.pool.QueryRow(ctx, `select current_database()`).Scan(&m.db); err != nil {
		return fmt.Errorf("cpu meter: %w", err)
	}
	m.first, m.last = map[int32]time.Duration{}, map[int32]time.Duration{}
	m.proc0 = ProcessCPU()
	return m.sample(ctx, true)
}

// Sample reads the database's backends now.
func (m *CPUMeter) Sample(ctx context.Context) error { return m.sample(ctx, false) }

func (m *CPUMeter) sample(ctx context.Context, start bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	rows, err := m.pool.Query(ctx, `select pid from pg_stat_activity where datname = $1`, m.db)
	if err != nil {
		return fmt.Errorf("cpu meter: %w", err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return fmt.Errorf("cpu meter: %w", err)
	}
	for _, pid := range pids {
		c, ok := procCPU(pid)
		if !ok {
			continue
		}
		if _, seen := m.first[pid]; !seen && start {
			m.first[pid] = c
		}
		m.last[pid] = c
	}
	return nil
}

// Used is the CPU since Start (the backends as of the last Sample).
func (m *CPUMeter) Used(ctx context.Context) (CPU, error) {
	if err := m.Sample(ctx); err != nil {
		return CPU{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var pg time.Duration
	for pid, c := range m.last {
		pg += c - m.first[pid]
	}
	return CPU{Process: ProcessCPU() - m.proc0, Postgres: pg, Missed: m.missed}, nil
}

// Run samples every interval until ctx ends (call it in a goroutine).
func (m *CPUMeter) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := m.Sample(ctx); err != nil && ctx.Err() == nil {
				m.mu.Lock()
				m.missed++ // only a short-lived backend's CPU can be lost
				m.mu.Unlock()
			}
		}
	}
}

// ProcessCPU is this process's user + system CPU time so far.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is a process's user + system CPU time from /proc/<pid>/stat.
func procCPU(pid int32) (time.Duration, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return 0, false
	}
	fields := strings.Fields(s[i+2:]) // after "pid (comm) "
	if len(fields) < 13 {
		return 0, false
	}
	var u, k int64
	if _, err := fmt.Sscan(fields[11]+" "+fields[12], &u, &k); err != nil {
		return 0, false
	}
	return time.Duration(u+k) * 10 * time.Millisecond, true // USER_HZ = 100
}

// Machine is the whole machine's CPU over a window (/proc/stat: every
// core, every process and the kernel's own work): printed beside a figure
// and beside its ceiling, it shows whether both were bound by the CPU and
// what each item cost the machine, which is what a ratio of two CPU-bound
// figures compares. Where the kernel keeps pressure stall information
// (/proc/pressure/cpu), the note also says for how much of the window some
// runnable task waited for a core: a figure whose cores are partly idle
// while tasks wait half the time does its work in bursts (a serial path
// and the work it releases in turn), where one whose cores are busy and
// whose tasks wait as long is bound by the CPU throughout.
type Machine struct {
	busy0, total0 uint64
	ok            bool
	start         time.Time
	waited0       time.Duration
	psi           bool
}

// StartMachine begins a window.
func StartMachine() Machine {
	b, t, ok := machineTicks()
	w, psi := cpuPressure()
	return Machine{busy0: b, total0: t, ok: ok, start: time.Now(), waited0: w, psi: psi}
}

// Note is the window so far, for n items: "machine: 297.3µs of CPU per
// row, the cores 95 % busy, a task waiting for one 81 % of the time" (the
// last part only where pressure is read).
func (m Machine) Note(n int, item string) string {
	b, t, ok := machineTicks()
	if !m.ok || !ok || t <= m.total0 || n <= 0 {
		return "machine CPU not read"
	}
	busy, total := b-m.busy0, t-m.total0
	per := time.Duration(busy) * 10 * time.Millisecond / time.Duration(n) // USER_HZ = 100
	note := fmt.Sprintf("machine: %s of CPU per %s, the cores %.0f %% busy", per.Round(100*time.Nanosecond), item, 100*float64(busy)/float64(total))
	if w, ok := cpuPressure(); ok && m.psi {
		if window := time.Since(m.start); window > 0 {
			// The two windows are read microseconds apart: capped at the whole.
			share := min(100*float64(w-m.waited0)/float64(window), 100)
			note += fmt.Sprintf(", a task waiting for one %.0f %% of the time", share)
		}
	}
	return note
}

// cpuPressure is the time so far during which some runnable task waited
// for a core (/proc/pressure/cpu, "some ... total=" in microseconds);
// false where the kernel keeps no such count.
func cpuPressure() (time.Duration, bool) {
	b, err := os.ReadFile("/proc/pressure/cpu")
	if err != nil {
		return 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return pressureSome(line)
}

// pressureSome reads the total of a pressure file's "some" line.
func pressureSome(line string) (time.Duration, bool) {
	f := strings.Fields(line)
	if len(f) == 0 || f[0] != "some" {
		return 0, false
	}
	for _, kv := range f[1:] {
		if v, ok := strings.CutPrefix(kv, "total="); ok {
			us, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return 0, false
			}
			return time.Duration(us) * time.Microsecond, true
		}
	}
	return 0, false
}

// machineTicks reads /proc/stat's first line: the ticks of every core in
// all (user, nice, system, idle, iowait, irq, softirq, steal; guest time is
// inside user and nice) and busy (all but idle, iowait and steal).
func machineTicks() (busy, total uint64, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return statTicks(line)
}

// statTicks is machineTicks for /proc/stat's first line.
func statTicks(line string) (busy, total uint64, ok bool) {
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, false
	}
	for i, s := range f[1:9] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		total += v
		if i != 3 && i != 4 && i != 7 {
			busy += v
		}
	}
	return busy, total, true
}
