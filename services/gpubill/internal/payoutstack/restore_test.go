package payoutstack_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/testkit"
	payoutv1 "github.com/gpubill/gpubill/proto/gen/gpubill/payout/v1"
	"github.com/gpubill/gpubill/services/gpubill/internal/backup"
	"github.com/gpubill/gpubill/services/gpubill/internal/cli"
	"github.com/gpubill/gpubill/services/payout"
)

// After a restore a payout's version restarts from the snapshot's. A payout
// changed after the snapshot (a payout method set: version 2) and changed
// otherwise after the restore (another method: version 2 again) must not
// be answered under the ETag, nor announced under the webhook event id,
// issued before the restore: a provider polling with If-None-Match got
// 304 and kept the first method, and a receiver deduplicating by event id
// dropped the second change. The same snapshot restored twice gets two
// epochs (a counter kept in the snapshot would give both the same).
func TestRestoreNeverReissuesAnETagOrEventID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const provider, hookSecret = "p-restore", "whsec-restore-0123456789"
	// The restored stack must open the webhook secrets the first sealed.
	cfg := payout.Config{WebhookAllowPrivate: true, WebhookKey: bytes.Repeat([]byte{7}, 32)}

	// The receiver outlives the disaster: it keeps every body it got per
	// event id.
	var mu sync.Mutex
	got := map[string][]string{} // event id → the bodies received under it
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		var ev payout.WebhookEvent
		if err == nil {
			err = json.Unmarshal(b, &ev)
		}
		if err != nil || ev.EventID != r.Header.Get("Gpubill-Event-Id") {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if !slices.Contains(got[ev.EventID], string(b)) { // else a redelivery
			got[ev.EventID] = append(got[ev.EventID], string(b))
		}
	}))
	defer recv.Close()
	// delivered waits for the change whose note names the account and
	// returns its event id.
	delivered := func(account string) string {
		t.Helper()
		var id string
		testkit.Eventually(t, waitLong, func() bool {
			mu.Lock()
			defer mu.Unlock()
			for eid, bodies := range got {
				for _, b := range bodies {
					if strings.Contains(b, "****"+account) {
						id = eid
					}
				}
			}
			return id != ""
		}, "the change naming ****%s delivered", account)
		return id
	}
	version := func(dsn string) (v int64) {
		t.Helper()
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		if err := c.QueryRow(ctx, `select version from payout.payouts where provider_id = $1`, provider).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}

	src := newStack(t, cfg)
	if _, err := src.s.API().CreateWebhook(as(auth.RoleProvider, provider), &payoutv1.CreateWebhookRequest{ProviderId: provider,
		Url: recv.URL, Secret: hookSecret}); err != nil {
		t.Fatal(err)
	}
	src.publishSettled(t, provider, "cyc-20260101", "CNY", "250.00")
	p := src.waitStatus(t, provider, "cyc-20260101", "action_required", waitLong) // no KYC: it waits at the gate
	dir := filepath.Join(t.TempDir(), "snap")
	if _, err := backup.Take(ctx, src.dsn, dir, backup.Tools{}, time.Now()); err != nil {
		t.Fatal(err)
	}

	// After the snapshot, before the disaster: a method set.
	src.method(t, provider, "6222000011110001")
	idBefore := delivered("0001")
	path, list := "/v1/payouts/"+p.PayoutId, "/v1/providers/"+provider+"/payouts"
	code, h, _ := src.rest(t, "GET", path, auth.RoleProvider, provider, "")
	tagBefore := h.Get("ETag")
	_, lh, _ := src.rest(t, "GET", list, auth.RoleProvider, provider, "")
	listTagBefore := lh.Get("ETag")
	if code != http.StatusOK || tagBefore == "" || listTagBefore == "" {
		t.Fatalf("GET %s: %d, ETag %q, list ETag %q", path, code, tagBefore, listTagBefore)
	}
	vBefore := version(src.dsn)
	src.stopPayout()
	// The old Temporal is lost with the disaster: the restored payout's
	// workflow is started anew by the restored stack.
	if err := src.tc.TerminateWorkflow(ctx, src.s.WorkflowID(p.PayoutId), "", "disaster"); err != nil {
		t.Fatal(err)
	}

	dst := testkit.NewDatabase(t)
	if _, err := backup.Restore(ctx, dst, dir, backup.Tools{}); err != nil {
		t.Fatal(err)
	}
	again := testkit.NewDatabase(t)
	var out, errOut bytes.Buffer
	if code := cli.Main(ctx, []string{"restore", dir, "--database-url", again}, &out, &errOut); code != 0 {
		t.Fatalf("gpubill restore: exit %d, %s %s", code, out.String(), errOut.String())
	}
	restored := newStackOn(t, dst, cfg)
	restored.method(t, provider, "6222000011110002")
	idAfter := delivered("0002")
	if vAfter := version(dst); vAfter != vBefore {
		t.Fatalf("the restored payout is at version %d, the source's was at %d: the test needs one version with two contents", vAfter, vBefore)
	}

	if idAfter == idBefore {
		t.Errorf("the change after the restore was sent under %s, the event id of the change before it (another method): "+
			"a receiver deduplicating by event id drops it", idAfter)
	}
	code, h, body := restored.rest(t, "GET", path, auth.RoleProvider, provider, tagBefore)
	if code != http.StatusOK || !strings.Contains(body, "****0002") || h.Get("ETag") == tagBefore {
		t.Errorf("GET %s with If-None-Match %s (issued before the restore, for ****0001): %d, ETag %q, %q; "+
			"want 200 with ****0002 under another ETag", path, tagBefore, code, h.Get("ETag"), body)
	}
	if code, h, _ := restored.rest(t, "GET", list, auth.RoleProvider, provider, listTagBefore); code != http.StatusOK || h.Get("ETag") == listTagBefore {
		t.Errorf("GET %s with If-None-Match %s (issued before the restore): %d, ETag %q; want 200 under another ETag",
			list, listTagBefore, code, h.Get("ETag"))
	}
	mu.Lock()
	for id, bodies := range got {
		if len(bodies) > 1 {
			t.Errorf("event id %s received with %d contents: %s", id, len(bodies), bodies)
		}
	}
	mu.Unlock()

	// The same snapshot restored again: another epoch than the first
	// restore's; the ledger's (lease event ids) is the restore's too.
	epoch := func(dsn, schema string) (e string) {
		t.Helper()
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		if err := c.QueryRow(ctx, `select epoch from `+schema+`.restore_epoch`).Scan(&e); err != nil {
			t.Fatal(err)
		}
		return e
	}
	if e1, e2 := epoch(dst, "payout"), epoch(again, "payout"); e1 == "" || e1 == e2 || epoch(src.dsn, "payout") == e1 {
		t.Errorf("restore epochs of one snapshot restored twice: %q and %q (source %q); want three different ones", e1, e2, epoch(src.dsn, "payout"))
	}
	if want := "restore epoch " + epoch(again, "payout") + " (ledger, payout)"; !strings.Contains(out.String(), want) {
		t.Errorf("gpubill restore said %q; want %q", out.String(), want)
	}
	if e1, l1 := epoch(dst, "payout"), epoch(dst, "ledger"); l1 != e1 || epoch(src.dsn, "ledger") == l1 {
		t.Errorf("the restored ledger's epoch %q, payout's %q, the source ledger's %q; want the restore's in both, not the source's",
			l1, e1, epoch(src.dsn, "ledger"))
	}
}

// A payout paid at its rail after the snapshot is gone with the disaster,
// and settlement settles its provider again after the restore (its
// settled message sent again). The payout made again must reach the rail
// under the reference the rail paid: Alipay is asked for it, answers it
// paid, and is not sent a second transfer. With a new random payout id it
// was: the provider was paid twice. Both stacks run on one Temporal, as
// test stacks do, each on its task queue: the restored one's workflow (the
// same payout id) must not be taken for the source's run, still watching
// for a return (domain.WorkflowIDOn).
func TestRestoreNeverPaysAPayoutTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const provider, cyc = "pa-restore", "cyc-20260101"
	cfg, g := alipayConfig(t)
	src := alipayStackOn(t, "", cfg)
	src.alipaySetup(t, provider, "2088123412340021", "")
	dir := filepath.Join(t.TempDir(), "snap")
	if _, err := backup.Take(ctx, src.dsn, dir, backup.Tools{}, time.Now()); err != nil {
		t.Fatal(err)
	}

	// After the snapshot, before the disaster: settled and paid.
	src.settle(t, provider, cyc, "CNY", "320.00")
	paid := src.waitStatus(t, provider, cyc, "paid", waitLong)
	src.stopPayout()

	dst := testkit.NewDatabase(t)
	if _, err := backup.Restore(ctx, dst, dir, backup.Tools{}); err != nil {
		t.Fatal(err)
	}
	restored := alipayStackOn(t, dst, cfg)
	restored.settle(t, provider, cyc, "CNY", "320.00")
	again := restored.waitStatus(t, provider, cyc, "paid", waitLong)
	if again.PayoutId != paid.PayoutId {
		calls, o := g.Transfers(again.PayoutId)
		t.Errorf("the payout made again after the restore is %s, the one paid before it %s: %d transfer calls under the new "+
			"reference (order %+v): the provider is paid twice", again.PayoutId, paid.PayoutId, calls, o)
	}
	if calls, o := g.Transfers(paid.PayoutId); calls != 1 || o == nil || o.Amount != "320.00" || o.Queries == 0 {
		t.Errorf("%s at the platform: %d transfer calls (want 1), order %+v (want it queried after the restore)", paid.PayoutId, calls, o)
	}
}
