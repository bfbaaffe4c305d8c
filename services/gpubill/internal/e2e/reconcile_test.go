package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/testkit"
)

// TestDailyReconciliationThroughREST: a deposit and an imported statement
// (CSV as the raw body) are reconciled on demand (POST, finance) and by the
// Temporal schedule (triggered; it calls the ledger as the stack's service
// identity); the runs are listed and read by an auditor, who may not start
// one.
func TestDailyReconciliationThroughREST(t *testing.T) {
	// A server of its own: the chain waits for every older transaction on
	// its server, and the shared one runs other tests' long bulk loads.
	f := newFixtureOn(t, testkit.NewCluster(t)+"/gpubill?sslmode=disable", nil)
	auditor, err := auth.Issue([]byte(secret), auth.RoleAuditor, "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	f.mustDo(http.MethodPost, "/v1/renters", map[string]any{"renter_id": "r-001", "name": "Lab", "currency": "CNY", "credit_limit": "0"})
	dep := f.mustDo(http.MethodPost, "/v1/deposits", map[string]any{"renter_id": "r-001", "amount": "100.00", "currency": "CNY", "external_ref": "bank-ref-1"})
	depID, _ := dep["transaction_id"].(string)
	testkit.Eventually(t, 30*time.Second, func() bool {
		var n int
		if err := f.st.Pool.QueryRow(context.Background(), `select count(*) from ledger.journal_chain where tx_id::text = $1`, depID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}, "deposit %s chained", depID)

	csv := "date,reference,amount,balance\n2026-11-30,bank-ref-1,100.00,100.00\n2026-11-30,interest,0.10,100.10\n"
	req, err := http.NewRequest(http.MethodPost, f.base+"/v1/bank-statements?statement_id=st-1&currency=CNY&account=CN-CLIENT-1", strings.NewReader(csv))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+f.finance)
	req.Header.Set("Content-Type", "text/csv")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("import statement: HTTP %d %s", resp.StatusCode, body)
	}

	if code, _ := f.do(http.MethodPost, "/v1/reconciliations", auditor, map[string]any{"currency": "CNY"}); code != http.StatusForbidden {
		t.Fatalf("an auditor starting a run: HTTP %d, want 403", code)
	}
	out := f.mustDo(http.MethodPost, "/v1/reconciliations", map[string]any{"currency": "CNY"})
	runs, _ := out["reconciliations"].([]any)
	if len(runs) != 1 {
		t.Fatalf("run: %v", out)
	}
	run := runs[0].(map[string]any)
	id, _ := run["reconciliation_id"].(string)
	matched, _ := run["matched"].([]any)
	inBank, _ := run["unmatched_in_bank"].([]any)
	if run["verdict"] != "exceptions" || run["trigger"] != "request" || run["requested_by"] != "finance" || len(matched) != 1 || len(inBank) != 1 ||
		fmt.Sprint(run["statement_ids"]) != "[st-1]" || run["bank_closing_balance"] != "100.10" || run["ledger_bank_client"] != "100.00" {
		t.Fatalf("run: %v", run)
	}
	m := matched[0].(map[string]any)
	if m["reference"] != "bank-ref-1" || m["movement_kind"] != "deposit" || m["bank_amount"] != "100.00" || m["ledger_amount"] != "100.00" ||
		fmt.Sprint(m["transaction_ids"]) != "["+depID+"]" {
		t.Fatalf("matched item: %v", m)
	}
	if u := inBank[0].(map[string]any); u["reference"] != "interest" || u["line_no"] != float64(2) || u["reason"] == "" {
		t.Fatalf("unmatched bank line: %v", u)
	}

	// The daily schedule, triggered now.
	tc, err := client.Dial(client.Options{HostPort: f.st.Temporal})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	// settlement creates its schedules once it runs: trigger when it exists.
	testkit.Eventually(t, 30*time.Second, func() bool {
		return tc.ScheduleClient().GetHandle(context.Background(), "ledger-reconciliation-daily").Trigger(context.Background(), client.ScheduleTriggerOptions{}) == nil
	}, "the reconciliation schedule triggered")
	var list map[string]any
	testkit.Eventually(t, 60*time.Second, func() bool {
		var code int
		code, list = f.do(http.MethodGet, "/v1/reconciliations?currency=CNY&page_size=1", auditor, nil)
		rs, _ := list["reconciliations"].([]any)
		return code == http.StatusOK && len(rs) == 1 && rs[0].(map[string]any)["trigger"] == "schedule"
	}, "a scheduled run listed")
	sched := list["reconciliations"].([]any)[0].(map[string]any)
	if sched["previous_reconciliation_id"] != id || sched["requested_by"] != "service:gpubill" || sched["unmatched_in_bank_count"] != float64(1) ||
		sched["matched_count"] != float64(0) || sched["matched"] != nil || list["next_page_token"] == "" {
		t.Fatalf("scheduled run (listed without items, a next page): %v", list)
	}
	code, got := f.do(http.MethodGet, "/v1/reconciliations/"+id, auditor, nil)
	if code != http.StatusOK || got["reconciliation_id"] != id || len(got["matched"].([]any)) != 1 {
		t.Fatalf("GET one: HTTP %d %v", code, got)
	}
	if code, _ := f.do(http.MethodGet, "/v1/reconciliations/rec_missing", auditor, nil); code != http.StatusNotFound {
		t.Fatalf("GET a missing run: HTTP %d, want 404", code)
	}
}

// TestStatementGapIsAReconciliationException: the statements of 1 and 3
// December are imported, the one of 2 December (a bank fee of 50, no
// ledger movement) is not; every line of the two matches. The run names the
// gap (1 December closes at 100, 3 December opens at 50), and the proof of
// cash at 3 December's close finds the 50 no item explains; the run is not
// reconciled. Once 2 December is imported (after 3 December: statements
// follow each other by their close, not their import) the gap is gone, the
// proof holds, and the fee is a line no movement explains. Without the
// check both runs were reconciled and the 50 never became an item. The
// account opens at 0: an opening balance the ledger never held would be a
// cash difference of its own in both runs.
func TestStatementGapIsAReconciliationException(t *testing.T) {
	f := newFixtureOn(t, testkit.NewCluster(t)+"/gpubill?sslmode=disable", nil)
	f.mustDo(http.MethodPost, "/v1/renters", map[string]any{"renter_id": "r-001", "name": "Lab", "currency": "CNY", "credit_limit": "0"})
	var depIDs []string
	for _, d := range []struct{ amount, ref string }{{"100.00", "gap-ref-1"}, {"20.00", "gap-ref-3"}} {
		dep := f.mustDo(http.MethodPost, "/v1/deposits", map[string]any{"renter_id": "r-001", "amount": d.amount, "currency": "CNY", "external_ref": d.ref})
		id, _ := dep["transaction_id"].(string)
		depIDs = append(depIDs, id)
	}
	testkit.Eventually(t, 30*time.Second, func() bool {
		var n int
		if err := f.st.Pool.QueryRow(context.Background(), `select count(*) from ledger.journal_chain where tx_id::text = any($1)`, depIDs).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == len(depIDs)
	}, "deposits %v chained", depIDs)
	importStatement := func(id, csv string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, f.base+"/v1/bank-statements?statement_id="+id+"&currency=CNY&account=CN-CLIENT-1", strings.NewReader(csv))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+f.finance)
		req.Header.Set("Content-Type", "text/csv")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("import %s: HTTP %d %s", id, resp.StatusCode, body)
		}
	}
	run := func() map[string]any {
		t.Helper()
		out := f.mustDo(http.MethodPost, "/v1/reconciliations", map[string]any{"currency": "CNY"})
		runs, _ := out["reconciliations"].([]any)
		if len(runs) != 1 {
			t.Fatalf("run: %v", out)
		}
		return runs[0].(map[string]any)
	}
	importStatement("st-20261201", "date,reference,amount,balance\n2026-12-01,gap-ref-1,100.00,100.00\n")
	importStatement("st-20261203", "date,reference,amount,balance\n2026-12-03,gap-ref-3,20.00,70.00\n")

	r1 := run()
	matched, _ := r1["matched"].([]any)
	if len(matched) != 2 || r1["unmatched_in_bank"] != nil && len(r1["unmatched_in_bank"].([]any)) != 0 {
		t.Fatalf("run 1: both lines matched, no other bank line: %v", r1)
	}
	if r1["verdict"] != "exceptions" {
		t.Fatalf("run 1: verdict %v, want exceptions (1 December closes at 100, 3 December opens at 50): %v", r1["verdict"], r1)
	}
	breaks, _ := r1["statement_breaks"].([]any)
	if len(breaks) != 1 || r1["statement_break_count"] != float64(1) {
		t.Fatalf("run 1: statement breaks %v, want one: %v", breaks, r1)
	}
	b := breaks[0].(map[string]any)
	if b["account"] != "CN-CLIENT-1" || b["previous_statement_id"] != "st-20261201" || b["statement_id"] != "st-20261203" ||
		b["previous_closing_balance"] != "100.00" || b["opening_balance"] != "50.00" || b["difference"] != "-50.00" {
		t.Fatalf("run 1: break %v", b)
	}
	reason, _ := b["reason"].(string)
	for _, s := range []string{"st-20261201", "st-20261203", "100.00", "50.00", "-50.00"} {
		if !strings.Contains(reason, s) {
			t.Errorf("run 1: the break's reason %q does not name %s", reason, s)
		}
	}
	// The deposits were recorded today, after every close: at 3 December's
	// close both lines are in transit (120.00) against the bank's 70.00.
	cash, _ := r1["cash_differences"].([]any)
	if len(cash) != 1 || r1["cash_difference_count"] != float64(1) {
		t.Fatalf("run 1: cash differences %v, want one (at 3 December's close): %v", cash, r1)
	}
	if d := cash[0].(map[string]any); d["statement_id"] != "st-20261203" || d["bank_closing_balance"] != "70.00" ||
		d["in_transit_bank"] != "120.00" || d["difference"] != "-50.00" {
		t.Fatalf("run 1: cash difference %v", d)
	}

	importStatement("st-20261202", "date,reference,amount,balance\n2026-12-02,bank-fee,-50.00,50.00\n")
	r2 := run()
	inBank, _ := r2["unmatched_in_bank"].([]any)
	if r2["statement_breaks"] != nil && len(r2["statement_breaks"].([]any)) != 0 || r2["statement_break_count"] != nil && r2["statement_break_count"] != float64(0) {
		t.Fatalf("run 2: the gap is filled, want no break: %v", r2)
	}
	if len(inBank) != 1 || r2["verdict"] != "exceptions" {
		t.Fatalf("run 2: the fee, unmatched in bank, is the exception: %v", r2)
	}
	if cash, _ := r2["cash_differences"].([]any); len(cash) != 0 || r2["cash_difference_count"] != float64(0) {
		t.Fatalf("run 2: the fee explains 2 December's close, want no cash difference: %v", r2)
	}
	if u := inBank[0].(map[string]any); u["statement_id"] != "st-20261202" || u["reference"] != "bank-fee" || u["bank_amount"] != "-50.00" {
		t.Fatalf("run 2: unmatched line %v, want the fee", u)
	}
}

// TestCashDifferenceThroughREST: the statement's one line matches the
// deposit, but the account closes at 110.00: it opened at 10.00 the ledger
// never recorded. The run is not reconciled, and a client reading it over
// REST sees why: a cash difference naming the statement and its close, the
// figures of the proof and the 10.00 no item explains, counted on the run
// and on its summary in the list. Before, the run answered verdict
// exceptions with every line matched and no item saying why.
func TestCashDifferenceThroughREST(t *testing.T) {
	f := newFixtureOn(t, testkit.NewCluster(t)+"/gpubill?sslmode=disable", nil)
	auditor, err := auth.Issue([]byte(secret), auth.RoleAuditor, "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	f.mustDo(http.MethodPost, "/v1/renters", map[string]any{"renter_id": "r-001", "name": "Lab", "currency": "CNY", "credit_limit": "0"})
	dep := f.mustDo(http.MethodPost, "/v1/deposits", map[string]any{"renter_id": "r-001", "amount": "100.00", "currency": "CNY", "external_ref": "cash-ref-1"})
	depID, _ := dep["transaction_id"].(string)
	testkit.Eventually(t, 30*time.Second, func() bool {
		var n int
		if err := f.st.Pool.QueryRow(context.Background(), `select count(*) from ledger.journal_chain where tx_id::text = $1`, depID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}, "deposit %s chained", depID)
	importStatementCSV(t, f, "st-cash", "date,reference,amount,balance\n2026-11-30,cash-ref-1,100.00,110.00\n")

	out := f.mustDo(http.MethodPost, "/v1/reconciliations", map[string]any{"currency": "CNY"})
	runs, _ := out["reconciliations"].([]any)
	if len(runs) != 1 {
		t.Fatalf("run: %v", out)
	}
	id, _ := runs[0].(map[string]any)["reconciliation_id"].(string)
	if n := runs[0].(map[string]any)["cash_difference_count"]; n != float64(1) {
		t.Fatalf("run answered: cash_difference_count %v, want 1: %v", n, runs[0])
	}

	code, got := f.do(http.MethodGet, "/v1/reconciliations/"+id, auditor, nil)
	if code != http.StatusOK || got["reconciliation_id"] != id {
		t.Fatalf("GET one: HTTP %d %v", code, got)
	}
	matched, _ := got["matched"].([]any)
	inBank, _ := got["unmatched_in_bank"].([]any)
	if got["verdict"] != "exceptions" || len(matched) != 1 || len(inBank) != 0 {
		t.Fatalf("GET one: want exceptions with the one line matched: %v", got)
	}
	diffs, _ := got["cash_differences"].([]any)
	if len(diffs) != 1 || got["cash_difference_count"] != float64(1) {
		t.Fatalf("GET one: cash differences %v (count %v), want one: %v", got["cash_differences"], got["cash_difference_count"], got)
	}
	// The statement closes at the end of its last day; the deposit was
	// recorded after that (today), so at the close bank:client held 0.00
	// and the matched line is in transit: 0.00 + 100.00 - 0.00 against the
	// bank's 110.00.
	d := diffs[0].(map[string]any)
	if gotD := fmt.Sprintf("%v %v %v bank %v ledger %v +%v -%v = %v", d["statement_id"], d["account"], d["closing_at"], d["bank_closing_balance"],
		d["ledger_bank_client"], d["in_transit_bank"], d["in_transit_ledger"], d["difference"]); gotD != "st-cash CN-CLIENT-1 2026-12-01T00:00:00Z bank 110.00 ledger 0.00 +100.00 -0.00 = 10.00" {
		t.Fatalf("GET one: cash difference %s: %v", gotD, d)
	}
	reason, _ := d["reason"].(string)
	for _, s := range []string{"st-cash", "110.00", "10.00"} {
		if !strings.Contains(reason, s) {
			t.Errorf("the cash difference's reason %q does not name %s", reason, s)
		}
	}

	code, list := f.do(http.MethodGet, "/v1/reconciliations?currency=CNY", auditor, nil)
	rs, _ := list["reconciliations"].([]any)
	if code != http.StatusOK || len(rs) != 1 {
		t.Fatalf("list: HTTP %d %v", code, list)
	}
	if s := rs[0].(map[string]any); s["reconciliation_id"] != id || s["cash_difference_count"] != float64(1) || s["cash_differences"] != nil {
		t.Fatalf("listed run (a count, no items): %v", s)
	}
}

// importStatementCSV imports a statement of CN-CLIENT-1 in CNY (CSV as the
// raw body), as finance.
func importStatementCSV(t *testing.T, f *fixture, id, csv string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.base+"/v1/bank-statements?statement_id="+id+"&currency=CNY&account=CN-CLIENT-1", strings.NewReader(csv))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+f.finance)
	req.Header.Set("Content-Type", "text/csv")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("import %s: HTTP %d %s", id, resp.StatusCode, body)
	}
}

// TestResolveReconciliationItemsThroughREST: two Alipay top-ups (keyed
// alipay:<trade_no>) reach the bank as one T+1 settlement line, and a bank
// fee has no movement: no reference names a movement's key, so both lines
// are exceptions, carried into every later run. Finance matches the
// settlement line to the two top-ups (their sum) and writes the fee off,
// with a reason; the next run is reconciled and the gauge drops to 0. The
// resolutions are listed on the run they resolved (who, when, why). Without
// them the two lines stayed exceptions, and the alert on, for good.
func TestResolveReconciliationItemsThroughREST(t *testing.T) {
	f := newFixtureOn(t, testkit.NewCluster(t)+"/gpubill?sslmode=disable", nil)
	auditor, err := auth.Issue([]byte(secret), auth.RoleAuditor, "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	f.mustDo(http.MethodPost, "/v1/renters", map[string]any{"renter_id": "r-001", "name": "Lab", "currency": "CNY", "credit_limit": "0"})
	var depIDs []string
	for _, d := range []struct{ amount, ref string }{{"300.00", "alipay:2026120122001"}, {"197.00", "alipay:2026120122002"}} {
		dep := f.mustDo(http.MethodPost, "/v1/deposits", map[string]any{"renter_id": "r-001", "amount": d.amount, "currency": "CNY", "external_ref": d.ref})
		id, _ := dep["transaction_id"].(string)
		depIDs = append(depIDs, id)
	}
	testkit.Eventually(t, 30*time.Second, func() bool {
		var n int
		if err := f.st.Pool.QueryRow(context.Background(), `select count(*) from ledger.journal_chain where tx_id::text = any($1)`, depIDs).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == len(depIDs)
	}, "deposits %v chained", depIDs)
	day := time.Now().UTC().Format(time.DateOnly)
	csv := "date,reference,amount,balance\n" + day + ",ALIPAY-STL-20261201,497.00,497.00\n" + day + ",FEE-2026-12,-25.00,472.00\n"
	req, err := http.NewRequest(http.MethodPost, f.base+"/v1/bank-statements?statement_id=st-alipay&currency=CNY&account=CN-CLIENT-1", strings.NewReader(csv))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+f.finance)
	req.Header.Set("Content-Type", "text/csv")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("import statement: HTTP %d %s", resp.StatusCode, body)
	}
	run := func() map[string]any {
		t.Helper()
		out := f.mustDo(http.MethodPost, "/v1/reconciliations", map[string]any{"currency": "CNY"})
		runs, _ := out["reconciliations"].([]any)
		if len(runs) != 1 {
			t.Fatalf("run: %v", out)
		}
		return runs[0].(map[string]any)
	}
	gauge := func() float64 {
		t.Helper()
		return metricValue(t, f.base+"/metrics", `gpubill_reconciliation_exceptions{currency="CNY"}`)
	}

	r1 := run()
	id, _ := r1["reconciliation_id"].(string)
	inBank, _ := r1["unmatched_in_bank"].([]any)
	if r1["verdict"] != "exceptions" || len(inBank) != 2 {
		t.Fatalf("run 1: the settlement and the fee lines are exceptions: %v", r1)
	}
	if v := gauge(); v != 1 {
		t.Fatalf("gpubill_reconciliation_exceptions %v after run 1, want 1", v)
	}

	path := "/v1/reconciliations/" + id + "/resolutions"
	match := map[string]any{"action": "match", "lines": []any{map[string]any{"statement_id": "st-alipay", "line_no": 1}},
		"transaction_ids": depIDs, "reason": "Alipay T+1 settlement of trades 2026120122001 and 2026120122002"}
	writeOff := map[string]any{"action": "write_off", "lines": []any{map[string]any{"statement_id": "st-alipay", "line_no": 2}},
		"reason": "December account fee, booked as bank charges"}
	if code, _ := f.do(http.MethodPost, path, auditor, match); code != http.StatusForbidden {
		t.Fatalf("an auditor resolving: HTTP %d, want 403", code)
	}
	short := map[string]any{"action": "match", "lines": match["lines"], "transaction_ids": depIDs[:1], "reason": "only one"}
	if code, out := f.do(http.MethodPost, path, f.finance, short); code != http.StatusBadRequest {
		t.Fatalf("a match whose amounts differ (497.00 against 300.00): HTTP %d %v, want 400", code, out)
	}
	m1 := f.mustDo(http.MethodPost, path, match)
	m2 := f.mustDo(http.MethodPost, path, match)
	res1, _ := m1["resolution"].(map[string]any)
	res2, _ := m2["resolution"].(map[string]any)
	if res1 == nil || res1["resolution_id"] == "" || fmt.Sprint(res1) != fmt.Sprint(res2) {
		t.Fatalf("the same match twice: %v then %v, want the same answer", m1, m2)
	}
	f.mustDo(http.MethodPost, path, writeOff)
	other := map[string]any{"action": "write_off", "lines": writeOff["lines"], "reason": "another reason"}
	if code, out := f.do(http.MethodPost, path, f.finance, other); code != http.StatusConflict {
		t.Fatalf("another body on a resolved line: HTTP %d %v, want 409", code, out)
	}
	code, got := f.do(http.MethodGet, "/v1/reconciliations/"+id, auditor, nil)
	rs, _ := got["resolutions"].([]any)
	if code != http.StatusOK || len(rs) != 2 {
		t.Fatalf("run 1 lists its two resolutions: HTTP %d %v", code, got)
	}
	if r := rs[0].(map[string]any); r["action"] != "match" || r["resolved_by"] != "finance" || r["reason"] != match["reason"] || r["created_at"] == nil {
		t.Fatalf("run 1's first resolution: %v", r)
	}

	r2 := run()
	if r2["verdict"] != "reconciled" || r2["unmatched_in_bank_count"] != nil && r2["unmatched_in_bank_count"] != float64(0) ||
		r2["unmatched_in_ledger_count"] != nil && r2["unmatched_in_ledger_count"] != float64(0) {
		t.Fatalf("run 2: every item resolved, want reconciled: %v", r2)
	}
	if v := gauge(); v != 0 {
		t.Fatalf("gpubill_reconciliation_exceptions %v after run 2, want 0", v)
	}
	if m3 := f.mustDo(http.MethodPost, path, match); fmt.Sprint(m3) != fmt.Sprint(m1) {
		t.Fatalf("the same match after a later run: %v, want %v", m3, m1)
	}
}
