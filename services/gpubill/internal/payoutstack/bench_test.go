package payoutstack_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
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
	benchClients    = 128 // concurrent requests at most
	benchWarmupReqs = 2000
)

// TestBenchPayoutStatus measures GET /v1/payouts/{id} by provider tokens at
// 2 000 requests/s (open loop: each request has its scheduled time and its
// latency counts from then, so a stall is not hidden), many providers,
// half the requests with If-None-Match (the current ETag: 304).
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
		_, _ = io.Copy(io.Discard, resp.Body)
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

	total := int(benchDuration.Seconds() * benchRate)
	lat := make([]time.Duration, total)
	var errs, notModified atomic.Int64
	sem := make(chan struct{}, benchClients)
	var wg sync.WaitGroup
	start := time.Now()
	interval := time.Second / benchRate
	for n := range total {
		due := start.Add(time.Duration(n) * interval)
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		sem <- struct{}{}
		wg.Add(1)
		go func(n int, due time.Time) {
			defer func() { <-sem; wg.Done() }()
			i := (n * 7919) % benchProviders // spread over providers
			etag := ""
			if n%2 == 0 {
				etag = tags[i]
			}
			code, _, err := get(i, etag)
			lat[n] = time.Since(due)
			switch {
			case err != nil || (code != 200 && code != 304):
				errs.Add(1)
			case code == 304:
				notModified.Add(1)
			}
		}(n, due)
	}
	wg.Wait()
	elapsed := time.Since(start)
	sort.Slice(lat, func(a, b int) bool { return lat[a] < lat[b] })
	p := func(q float64) float64 { return float64(lat[int(q*float64(total-1))].Microseconds()) / 1000 }
	if errs.Load() > 0 {
		t.Errorf("%d requests failed", errs.Load())
	}
	testkit.Report(t, testkit.Figure{Bench: "payout_status_p99", Value: p(0.99), Unit: "ms", N: total,
		Note: fmt.Sprintf("achieved %.0f req/s (target %d), p50 %.2f ms, p90 %.2f ms, p99.9 %.2f ms, %d providers, %d×304, %d errors",
			float64(total)/elapsed.Seconds(), benchRate, p(0.5), p(0.9), p(0.999), benchProviders, notModified.Load(), errs.Load())})
}
