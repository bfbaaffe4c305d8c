package pricingstack_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/server"
)

var secret = []byte("pricing-rest-test-secret-0123456789abcdef")

func token(t *testing.T, role, sub string) string {
	t.Helper()
	tok, err := auth.Issue(secret, role, sub, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestRESTPartiesCardsIngestQuote(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	srv, err := server.Start(context.Background(), server.Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Secret: secret,
		Log: s.deps.Log, Services: []server.Service{s.metering, s.pricing}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	base := "http://" + srv.HTTPAddr
	finance, meter, renter := token(t, "finance", ""), token(t, "meter", ""), token(t, "renter", "r-1")
	call := func(method, path, tok, body string) (int, map[string]any) {
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
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
			t.Fatalf("%s %s: answer %q: %v", method, path, b, err)
		}
		return resp.StatusCode, m
	}
	provider := `{"provider_id":"p-001","name":"Lab","tier":"pro","tax_profile":"individual","jurisdiction":"CN","pue":"1.6","currency":"CNY"}`
	card := `{"rate_card_id":"rc-cny-1","currency":"CNY","effective_from":"2026-01-01T00:00:00Z",
		"gpu_prices":[{"gpu_model":"RTX_4090","hourly":"2.00"}],
		"time_bands":[{"name":"night","start":"23:00","end":"07:00","timezone":"Asia/Shanghai","multiplier":"0.80"}],
		"volume_tiers":[{"up_to_gpu_hours":"100","discount":"0"},{"up_to_gpu_hours":"","discount":"0.10"}],
		"pue_surcharge":{"threshold":"1.5","per_gpu_hour":"0.05"}}`
	ingest := `{"events":[
		{"id":"evt-1","lease_id":"lease-9","provider_id":"p-001","renter_id":"r-1","gpu_model":"RTX_4090","gpu_count":2,
		 "start_time":"2026-11-18T14:00:00Z","end_time":"2026-11-18T16:30:00Z","region":"cn-east","workload":"training"},
		{"id":"evt-2","lease_id":"lease-9","provider_id":"p-001","renter_id":"r-1","gpu_model":"GTX_9999","gpu_count":1,
		 "start_time":"2026-11-18T14:00:00Z","end_time":"2026-11-18T16:30:00Z"}]}`
	tests := []struct {
		name, method, path, tok, body string
		want                          int
		wantField, wantValue          string
	}{
		{"no token", "POST", "/v1/providers", "", provider, 401, "", ""},
		{"renter may not create providers", "POST", "/v1/providers", renter, provider, 403, "", ""},
		{"bad tier", "POST", "/v1/providers", finance, strings.Replace(provider, `"pro"`, `"gold"`, 1), 400, "", ""},
		{"bad pue", "POST", "/v1/providers", finance, strings.Replace(provider, `"1.6"`, `"0.9"`, 1), 400, "", ""},
		{"pue above 10", "POST", "/v1/providers", finance, strings.Replace(provider, `"1.6"`, `"1e64"`, 1), 400, "", ""},
		{"create provider", "POST", "/v1/providers", finance, provider, 200, "tier", "pro"},
		{"replay provider", "POST", "/v1/providers", finance, provider, 200, "version", "1"},
		{"conflicting provider", "POST", "/v1/providers", finance, strings.Replace(provider, `"Lab"`, `"Other"`, 1), 409, "", ""},
		{"patch provider", "PATCH", "/v1/providers/p-001", finance, `{"tier":"partner"}`, 200, "tier", "partner"},
		{"patched version", "GET", "/v1/providers/p-001", finance, "", 200, "version", "2"},
		{"unknown provider", "GET", "/v1/providers/p-404", finance, "", 404, "", ""},
		{"bad renter currency", "POST", "/v1/renters", finance, `{"renter_id":"r-1","currency":"XYZ"}`, 400, "", ""},
		{"create renter", "POST", "/v1/renters", finance, `{"renter_id":"r-1","name":"AI Lab","currency":"CNY","credit_limit":"100"}`, 200, "currency", "CNY"},
		{"renter reads itself", "GET", "/v1/renters/r-1", renter, "", 200, "renter_id", "r-1"},
		{"renter reads another", "GET", "/v1/renters/r-2", renter, "", 403, "", ""},
		{"meter may not create cards", "POST", "/v1/rate-cards", meter, card, 403, "", ""},
		{"bad band zone", "POST", "/v1/rate-cards", finance, strings.Replace(card, "Asia/Shanghai", "Mars/Olympus", 1), 400, "", ""},
		{"create card", "POST", "/v1/rate-cards", finance, card, 200, "rate_card_id", "rc-cny-1"},
		{"replay card", "POST", "/v1/rate-cards", finance, card, 200, "rate_card_id", "rc-cny-1"},
		{"conflicting card", "POST", "/v1/rate-cards", finance, strings.Replace(card, `"2.00"`, `"3.00"`, 1), 409, "", ""},
		{"get card", "GET", "/v1/rate-cards/rc-cny-1", finance, "", 200, "currency", "CNY"},
		{"renter may not ingest", "POST", "/v1/usage-events", renter, ingest, 403, "", ""},
		{"ingest", "POST", "/v1/usage-events", meter, ingest, 200, "accepted", "1"},
		{"ingest replay", "POST", "/v1/usage-events", meter, ingest, 200, "duplicates", "1"},
		{"too many events", "POST", "/v1/usage-events", meter, `{"events":[` + strings.Repeat(`{"id":"x"},`, 5000) + `{"id":"y"}]}`, 400, "", ""},
		{"quote", "POST", "/v1/quotes", renter, `{"gpu_model":"RTX_4090","gpu_count":1,"hours":"2.5","start_time":"2026-11-18T14:00:00Z",
			"currency":"CNY","provider_tier":"pro","tax_profile":"individual"}`, 200, "renter_price", "4.40"},
		{"quote with PUE surcharge", "POST", "/v1/quotes", renter, `{"gpu_model":"RTX_4090","gpu_count":1,"hours":"2.5","start_time":"2026-11-18T14:00:00Z",
			"currency":"CNY","provider_tier":"pro","tax_profile":"individual","provider_pue":"1.6"}`, 200, "renter_price", "4.53"},
		{"quote with bad PUE", "POST", "/v1/quotes", renter, `{"gpu_model":"RTX_4090","gpu_count":1,"hours":"2.5","start_time":"2026-11-18T14:00:00Z",
			"currency":"CNY","provider_pue":"0.5"}`, 400, "", ""},
		{"quote with PUE above 10", "POST", "/v1/quotes", renter, `{"gpu_model":"RTX_4090","gpu_count":1,"hours":"2.5","start_time":"2026-11-18T14:00:00Z",
			"currency":"CNY","provider_pue":"11"}`, 400, "", ""},
		{"quote without token", "POST", "/v1/quotes", "", `{}`, 401, "", ""},
		{"bad quote", "POST", "/v1/quotes", renter, `{"gpu_model":"RTX_4090","gpu_count":0,"hours":"x","currency":"CNY"}`, 400, "", ""},
	}
	for _, tt := range tests {
		code, body := call(tt.method, tt.path, tt.tok, tt.body)
		if code != tt.want {
			t.Fatalf("%s: status %d, want %d (%v)", tt.name, code, tt.want, body)
		}
		if tt.wantField != "" {
			got, err := json.Marshal(body[tt.wantField])
			if err != nil {
				t.Fatal(err)
			}
			if strings.Trim(string(got), `"`) != tt.wantValue {
				t.Fatalf("%s: %s = %s, want %s (%v)", tt.name, tt.wantField, got, tt.wantValue, body)
			}
		}
	}
	// A card whose bands share an hour is a 400 naming the band that
	// overlaps and the one it overlaps, and is not stored: it was a 200, and
	// 06:00–07:00 priced by whichever band was listed first.
	overlap := strings.Replace(strings.Replace(card, `"rc-cny-1"`, `"rc-cny-overlap"`, 1), `"multiplier":"0.80"}]`,
		`"multiplier":"0.80"},{"name":"peak","start":"06:00","end":"09:00","timezone":"Asia/Shanghai","multiplier":"1.50"}]`, 1)
	code, refused := call("POST", "/v1/rate-cards", finance, overlap)
	said, err := json.Marshal(refused)
	if err != nil {
		t.Fatal(err)
	}
	if code != 400 || !strings.Contains(string(said), `time_bands[1]`) || !strings.Contains(string(said), `overlaps time_bands[0]`) {
		t.Fatalf("card with overlapping bands: %d %s; want 400 on time_bands[1], naming time_bands[0]", code, said)
	}
	if code, _ := call("GET", "/v1/rate-cards/rc-cny-overlap", finance, ""); code != 404 {
		t.Fatalf("the refused card: GET answered %d, want 404", code)
	}
	// Each line of a quote names the card that priced it.
	_, cnyQuote := call("POST", "/v1/quotes", renter, `{"gpu_model":"RTX_4090","gpu_count":1,"hours":"2.5","start_time":"2026-11-18T14:00:00Z","currency":"CNY"}`)
	lines, _ := cnyQuote["lines"].([]any)
	for _, l := range lines {
		if l.(map[string]any)["rate_card_id"] != "rc-cny-1" {
			t.Fatalf("quote line %v, want it to name rc-cny-1", l)
		}
	}
	if len(lines) == 0 {
		t.Fatalf("quote %v: no lines", cnyQuote)
	}
	// A card sent without rate_card_id is named by its body: the client's
	// retry answers the card it made. A retry made a second version, and one
	// delayed past a correction of the same effective_from (a higher seq)
	// put the old prices back in force.
	usd := `{"currency":"USD","effective_from":"2026-01-01T00:00:00Z","gpu_prices":[{"gpu_model":"RTX_4090","hourly":"1.00"}]}`
	corrected := strings.Replace(usd, `"1.00"`, `"1.20"`, 1)
	_, first := call("POST", "/v1/rate-cards", finance, usd)
	_, second := call("POST", "/v1/rate-cards", finance, corrected)
	code, retried := call("POST", "/v1/rate-cards", finance, usd)
	if code != 200 || retried["rate_card_id"] != first["rate_card_id"] || second["rate_card_id"] == first["rate_card_id"] {
		t.Fatalf("card %v, correction %v, the card's retry %d %v: want the retry answered the card", first["rate_card_id"], second["rate_card_id"], code, retried)
	}
	if _, list := call("GET", "/v1/rate-cards?currency=USD", finance, ""); len(list["rate_cards"].([]any)) != 2 {
		t.Fatalf("USD cards: %v, want the card and its correction", list)
	}
	if _, q := call("POST", "/v1/quotes", renter, `{"gpu_model":"RTX_4090","gpu_count":1,"hours":"1","start_time":"2026-11-18T14:00:00Z","currency":"USD"}`); q["renter_price"] != "1.20" {
		t.Fatalf("USD quote after the card's retry: %v, want the correction's 1.20", q)
	}
	// The quote uses the same code as charges: 1 h day at 2.00 + 1.5 h night at 1.60,
	// split by pkg/split (pro 20 %, individual 20 % of the rest).
	_, q := call("POST", "/v1/quotes", renter, `{"gpu_model":"RTX_4090","gpu_count":1,"hours":"2.5","start_time":"2026-11-18T14:00:00Z",
		"currency":"CNY","provider_tier":"pro","tax_profile":"individual"}`)
	if q["commission"] != "0.88" || q["tax_withheld"] != "0.70" || q["provider_net"] != "2.82" {
		t.Fatalf("quote %v", q)
	}
}
