package payoutstack_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/payout"
)

// Benchmark shape: payout_status_p99.
const (
	benchProviders  = 2000
	benchRate       = 2000 // requests per second, paced
	benchDuration   = 15 * time.Second
	benchClients    = 64 // keep-alive connections of the load generator (requests in flight at most)
	benchWarmupReqs = 2000
)

// TestBenchPayoutStatus measures GET /v1/payouts/{id} by provider tokens at
// 2 000 requests/s (open loop: each request has its scheduled time and its
// latency counts from then, so a stall is not hidden — a request waiting
// for a free connection waits on the clock), many providers, half the
// requests with If-None-Match (the current ETag: 304). The figure carries
// the rate achieved and the load average (the machine is shared), the note
// the test process's CPU per request (load generator and server).
func TestBenchPayoutStatus(t *testing.T) {
	testkit.Bench(t, "payout_status_p99")
	st := newStack(t, payout.Config{})
	ctx := context.Background()
	// Paid payouts with a full history, written directly (the workflows are
	// not what is measured).
	for _, q := range []string{`
		insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission, tax_withheld, net, status,
			method, method_summary, rail_reference, workflow_started, version, expected_arrival, created_at, updated_at)
		select 'po-bench-' || i, 'p-' || lpad(i::text, 5, '0'), 'cyc-20260101', 'CNY', 1000, 250, 150, 600, 'paid',
			'bank', 'bank ****0001', 'po-bench-' || i, true, 5, date '2026-02-18', now(), now()
		from generate_series(1, $1::int) i`, `
		insert into payout.status_history (payout_id, seq, status, note, at)
		select 'po-bench-' || i, s, (array['created', 'submitted', 'in_transit', 'paid'])[s], 'bench', now()
		from generate_series(1, $1::int) i, generate_series(1, 4) s`, `
		insert into payout.payout_statements (payout_id, cycle_id, currency, net)
		select 'po-bench-' || i, 'cyc-20260101', 'CNY', 600 from generate_series(1, $1::int) i`} {
		if _, err := st.d.Pool.Exec(ctx, q, benchProviders); err != nil {
			t.Fatal(err)
		}
	}
	tokens := make([]string, benchProviders)
	tags := make([]string, benchProviders)
	for i := range tokens {
		tok, err := auth.Issue(st.secret, auth.RoleProvider, fmt.Sprintf("p-%05d", i+1), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		tokens[i] = tok
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: benchClients, MaxConnsPerHost: benchClients}}
	get := func(i int, etag string) (int, string, error) {
		req, err := http.NewRequest("GET", fmt.Sprintf("http://%s/v1/payouts/po-bench-%d", st.http, i+1), nil)
		if err != nil {
			return 0, "", err
		}
		req.Header.Set("Authorization", "Bearer "+tokens[i])
		if etag != "" {
			req.Header.Set("If-None-Match", etag)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			resp.Body.Close()
			return 0, "", err
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("ETag"), nil
	}
	for i := range benchWarmupReqs { // warm-up, and learn each payout's ETag
		code, tag, err := get(i%benchProviders, "")
		if err != nil || code != 200 {
			t.Fatalf("warm-up %d: %d %v", i, code, err)
		}
		tags[i%benchProviders] = tag
	}

	// Every request's bytes are made before the clock starts; the
	// generator writes them on keep-alive connections and reads only the
	// status line and headers it needs (net/http's client cost a seventh
	// of the process's CPU).
	total := int(benchDuration.Seconds() * benchRate)
	reqs := make([][]byte, total)
	for n := range reqs {
		i := (n * 7919) % benchProviders // spread over providers
		b := fmt.Appendf(nil, "GET /v1/payouts/po-bench-%d HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n", i+1, st.http, tokens[i])
		if n%2 == 0 { // half poll with the current ETag
			b = fmt.Appendf(b, "If-None-Match: %s\r\n", tags[i])
		}
		reqs[n] = append(b, "\r\n"...)
	}
	loadBefore := testkit.LoadAvg()
	cpuBefore := processCPU()
	lat := make([]time.Duration, total)
	var errs, notModified atomic.Int64
	type job struct {
		n   int
		due time.Time
	}
	jobs := make(chan job, total) // open loop: a job waits here, its latency counting, when every connection is busy
	var wg sync.WaitGroup
	for range benchClients {
		conn, err := net.Dial("tcp", st.http)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			rd := bufio.NewReaderSize(conn, 16<<10)
			for j := range jobs {
				code, err := roundTrip(conn, rd, reqs[j.n])
				lat[j.n] = time.Since(j.due)
				switch {
				case err != nil:
					errs.Add(1)
					t.Errorf("request %d: %v", j.n, err)
					for range jobs { // this connection is done; count the rest as failed
						errs.Add(1)
					}
					return
				case code == http.StatusNotModified:
					notModified.Add(1)
				case code != http.StatusOK:
					errs.Add(1)
				}
			}
		}()
	}
	start := time.Now()
	interval := time.Second / benchRate
	for n := range total {
		due := start.Add(time.Duration(n) * interval)
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		jobs <- job{n, due}
	}
	close(jobs)
	wg.Wait()
	elapsed := time.Since(start)
	cpu := processCPU() - cpuBefore
	sort.Slice(lat, func(a, b int) bool { return lat[a] < lat[b] })
	p := func(q float64) float64 { return float64(lat[int(q*float64(total-1))].Microseconds()) / 1000 }
	if errs.Load() > 0 {
		t.Errorf("%d requests failed", errs.Load())
	}
	rate := float64(total) / elapsed.Seconds()
	load := testkit.LoadAvg()
	testkit.Report(t, testkit.Figure{Bench: "payout_status_p99", Value: p(0.99), Unit: "ms", N: total, Rate: math.Round(rate), Load: load,
		Note: fmt.Sprintf("achieved %.0f req/s (target %d), p50 %.2f ms, p90 %.2f ms, p99.9 %.2f ms, max %.2f ms, %d providers, %d×304, %d errors; "+
			"test process (load generator + server) %.0f µs CPU per request; load average %.1f before, %.1f after",
			rate, benchRate, p(0.5), p(0.9), p(0.999), p(1), benchProviders, notModified.Load(), errs.Load(),
			float64(cpu.Microseconds())/float64(total), loadBefore, load)})
}

// roundTrip writes one HTTP/1.1 request and reads its answer's status,
// discarding the body (Content-Length or chunked).
func roundTrip(conn net.Conn, rd *bufio.Reader, req []byte) (int, error) {
	if _, err := conn.Write(req); err != nil {
		return 0, err
	}
	line, err := rd.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) {
		return 0, fmt.Errorf("status line %q", line)
	}
	code, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, fmt.Errorf("status line %q", line)
	}
	length, chunked := 0, false
	for {
		h, err := rd.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		if len(h) <= 2 {
			break
		}
		k, v, _ := bytes.Cut(bytes.TrimSpace(h), []byte(":"))
		switch {
		case bytes.EqualFold(k, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(bytes.TrimSpace(v))); err != nil {
				return 0, fmt.Errorf("header %q", h)
			}
		case bytes.EqualFold(k, []byte("Transfer-Encoding")):
			chunked = bytes.Contains(v, []byte("chunked"))
		}
	}
	if !chunked {
		_, err = rd.Discard(length)
		return code, err
	}
	for {
		l, err := rd.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		size, err := strconv.ParseInt(string(bytes.TrimSpace(l)), 16, 64)
		if err != nil {
			return 0, fmt.Errorf("chunk size %q", l)
		}
		if _, err := rd.Discard(int(size) + 2); err != nil {
			return 0, err
		}
		if size == 0 {
			return code, nil
		}
	}
}

// processCPU is the CPU time (user + system) this process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
