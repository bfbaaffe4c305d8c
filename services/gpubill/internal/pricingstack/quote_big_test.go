package pricingstack_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/gpubill/gpubill/pkg/server"
)

// A quote of 10 ETH (10^19 minor units, above int64) is split exactly
// through REST, not answered with a 500: standard 25 % commission, 20 % tax
// on the rest, the remainder net.
func TestRESTQuoteTenETH(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	srv, err := server.Start(context.Background(), server.Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Secret: secret,
		Log: s.deps.Log, Services: []server.Service{s.metering, s.pricing}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	call := func(path, tok, body string) (int, map[string]any) {
		req, err := http.NewRequest("POST", "http://"+srv.HTTPAddr+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s: %s: %v", path, b, err)
		}
		return resp.StatusCode, m
	}
	card := `{"rate_card_id":"rc-eth-1","currency":"ETH","effective_from":"2026-01-01T00:00:00Z",
		"gpu_prices":[{"gpu_model":"H100","hourly":"2.5"}]}`
	if code, body := call("/v1/rate-cards", token(t, "finance", ""), card); code != 200 {
		t.Fatalf("card: %d %v", code, body)
	}
	code, q := call("/v1/quotes", token(t, "renter", "r-1"), `{"gpu_model":"H100","gpu_count":2,"hours":"2","start_time":"2026-11-18T14:00:00Z",
		"currency":"ETH","provider_tier":"standard","tax_profile":"individual"}`)
	want := map[string]string{"renter_price": "10.000000000000000000", "commission": "2.500000000000000000",
		"tax_withheld": "1.500000000000000000", "provider_net": "6.000000000000000000", "currency": "ETH"}
	if code != 200 {
		t.Fatalf("quote: %d %v", code, q)
	}
	for k, v := range want {
		if q[k] != v {
			t.Fatalf("quote %s = %v, want %s (%v)", k, q[k], v, q)
		}
	}
}
