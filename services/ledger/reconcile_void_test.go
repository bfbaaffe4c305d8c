package ledger_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/auth"
)

// TestVoidReconciliationResolutionReopensItems: a resolution by hand could
// not be undone, so finance writing off the wrong items had no way back
// (each line and movement resolved once, for good). Voiding one (finance,
// with a reason of at most 500 bytes; the same void again answers the
// same, another reason is 409) opens its items again in the next run,
// which lists the voided resolution; they may then be resolved anew. A
// resolution voided before the next run, while its own run is still the
// latest, is carried once, not twice.
func TestVoidReconciliationResolutionReopensItems(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	base, secret := startServer(t, f)
	token := func(role string) string {
		tok, err := auth.Issue(secret, role, "", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	fin, aud := restClient{t: t, base: base, token: token(auth.RoleFinance)}, restClient{t: t, base: base, token: token(auth.RoleAuditor)}
	call := func(c restClient, method, path string, body any, wantCode int) map[string]any {
		t.Helper()
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		if body == nil {
			b = nil
		}
		code, out := c.do(method, path, string(b))
		if code != wantCode {
			t.Fatalf("%s %s: HTTP %d %s, want %d", method, path, code, out, wantCode)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatalf("%s %s: %v in %s", method, path, err, out)
		}
		return m
	}
	f.deposit(t, "r-1", "100.00", "CNY", "bank-ref-1")
	stray := f.deposit(t, "r-2", "50.00", "CNY", "manual-7f3a") // no line will name it
	chainAll(t, f)
	importCSV(t, f, "st-1", "date,reference,amount,balance\n2026-11-30,bank-ref-1,100.00,100.00\n2026-11-30,FEE-2026-11,-25.00,75.00\n")
	run := func() map[string]any {
		t.Helper()
		runs, _ := call(fin, "POST", "/v1/reconciliations", map[string]any{"currency": "CNY"}, 200)["reconciliations"].([]any)
		if len(runs) != 1 {
			t.Fatalf("a run of CNY: %v", runs)
		}
		return runs[0].(map[string]any)
	}
	items := func(r map[string]any) string { // line numbers in bank; movement keys in ledger
		var b, l []string
		for _, it := range asList(r["unmatched_in_bank"]) {
			b = append(b, fmt.Sprint(it.(map[string]any)["line_no"]))
		}
		for _, it := range asList(r["unmatched_in_ledger"]) {
			l = append(l, fmt.Sprint(it.(map[string]any)["movement_key"]))
		}
		return fmt.Sprintf("%s bank %v ledger %v", r["verdict"], b, l)
	}
	resolve := func(runID, reason string) map[string]any {
		t.Helper()
		body := map[string]any{"action": "write_off", "lines": []any{map[string]any{"statement_id": "st-1", "line_no": 2}},
			"transaction_ids": []string{stray.ID}, "reason": reason}
		return call(fin, "POST", "/v1/reconciliations/"+runID+"/resolutions", body, 200)["resolution"].(map[string]any)
	}

	r1 := run()
	if got := items(r1); got != "exceptions bank [2] ledger [manual-7f3a]" {
		t.Fatalf("run 1: %s", got)
	}
	r1ID := r1["reconciliation_id"].(string)
	wrong := resolve(r1ID, "written off in error")
	if got := items(run()); got != "reconciled bank [] ledger []" {
		t.Fatalf("run 2, after the write-off: %s", got)
	}

	resID := wrong["resolution_id"].(string)
	voidPath := "/v1/reconciliations/" + r1ID + "/resolutions/" + resID + ":void"
	reason := "the fee is the bank's error and the deposit is a duplicate: both go back to the exceptions"
	v1 := call(fin, "POST", voidPath, map[string]any{"reason": reason}, 200)["resolution"].(map[string]any)
	v2 := call(fin, "POST", voidPath, map[string]any{"reason": reason}, 200)["resolution"].(map[string]any)
	if v1["resolution_id"] != resID || v1["void_reason"] != reason || v1["voided_by"] != "finance" || v1["voided_at"] == nil || fmt.Sprint(v1) != fmt.Sprint(v2) {
		t.Fatalf("void, then the same void again: %v then %v; want the resolution, voided by finance with the reason, twice the same", v1, v2)
	}
	call(fin, "POST", voidPath, map[string]any{"reason": "another reason"}, 409)
	call(aud, "POST", voidPath, map[string]any{"reason": reason}, 403)
	call(fin, "POST", voidPath, map[string]any{"reason": "  "}, 400)
	call(fin, "POST", voidPath, map[string]any{"reason": strings.Repeat("é", 251)}, 400) // 502 bytes
	call(fin, "POST", "/v1/reconciliations/"+r1ID+"/resolutions/res-unknown:void", map[string]any{"reason": reason}, 404)
	if got := call(aud, "GET", "/v1/reconciliations/"+r1ID, nil, 200); fmt.Sprint(asList(got["resolutions"])[0]) != fmt.Sprint(v1) {
		t.Fatalf("run 1 lists its resolution as voided: %v, want %v", got["resolutions"], v1)
	}

	// The next run has the items again, and lists the voided resolution.
	r3 := run()
	if got := items(r3); got != "exceptions bank [2] ledger [manual-7f3a]" {
		t.Fatalf("run 3, after the void: %s", got)
	}
	r3ID := r3["reconciliation_id"].(string)
	got3 := call(aud, "GET", "/v1/reconciliations/"+r3ID, nil, 200)
	if re := asList(got3["reopened_resolutions"]); len(re) != 1 || fmt.Sprint(re[0]) != fmt.Sprint(v1) {
		t.Fatalf("run 3 lists the voided resolution whose items it opened again: %v, want %v", got3["reopened_resolutions"], v1)
	}
	// The run's own answer (POST) carries them as GET does: it carried
	// none, the void showing only on a later read.
	for _, k := range []string{"reopened_resolutions", "reopened_resolution_count", "reopened_resolutions_next_page_token"} {
		if fmt.Sprint(r3[k]) != fmt.Sprint(got3[k]) {
			t.Fatalf("run 3's POST answer: %s %v; GET answers %v", k, r3[k], got3[k])
		}
	}
	// Resolved anew, then voided before the next run: carried once.
	again := resolve(r3ID, "written off again, in error again")
	call(fin, "POST", "/v1/reconciliations/"+r3ID+"/resolutions/"+again["resolution_id"].(string)+":void", map[string]any{"reason": reason}, 200)
	r4 := run()
	if got := items(r4); got != "exceptions bank [2] ledger [manual-7f3a]" {
		t.Fatalf("run 4, after a void on the latest run: %s", got)
	}
	resolve(r4["reconciliation_id"].(string), "bank fee and a duplicate deposit refunded outside gpubill")
	if got := items(run()); got != "reconciled bank [] ledger []" {
		t.Fatalf("run 5, resolved for good: %s", got)
	}
	var n int
	if err := f.pool.QueryRow(f.ctx, `select count(*) from ledger.reconciliation_resolution_voids`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d voids kept (%v), want 2", n, err)
	}
	if _, err := f.pool.Exec(f.ctx, `delete from ledger.reconciliation_resolution_voids`); err == nil || !strings.Contains(err.Error(), "kept as they were") {
		t.Fatalf("deleting voids: %v; want refused", err)
	}
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}
