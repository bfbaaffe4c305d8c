package alipay_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"strings"
	"testing"

	"github.com/shopspring/decimal"

	ap "github.com/gpubill/gpubill/pkg/alipay"
	"github.com/gpubill/gpubill/pkg/alipay/fakealipay"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/services/payout/internal/adapters/alipay"
	"github.com/gpubill/gpubill/services/payout/internal/app"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

const appID = "2021000000000001"

func key(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// gateway is a fake open platform and a rail configured for it.
func gateway(t *testing.T) (*fakealipay.Gateway, *alipay.Rail, *rsa.PrivateKey) {
	t.Helper()
	appKey := key(t)
	g, err := fakealipay.New(appID, &appKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	cfg := ap.Config{AppID: appID, PrivateKey: appKey, PlatformKey: &g.PlatformKey.PublicKey, GatewayURL: g.URL,
		NotifyURL: "http://127.0.0.1:1/v1/rails/alipay/notify", SellerID: g.SellerID}
	if err := cfg.Check(); err != nil {
		t.Fatal(err)
	}
	return g, &alipay.Rail{C: &ap.Client{Cfg: cfg, Clock: clock.System{}}}, appKey
}

func transfer(ref, id, name, amount string) app.Transfer {
	return app.Transfer{Reference: ref, ProviderID: "p-1", Currency: "CNY", Amount: decimal.RequireFromString(amount),
		Method: domain.Method{Type: domain.MethodAlipay, AlipayID: id, AccountName: name}}
}

// Each payee's fate at the fake gateway, as the rail reports it: the
// Alipay error codes map to the failure codes a provider sees.
func TestRailOutcomes(t *testing.T) {
	t.Parallel()
	g, rail, _ := gateway(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name, id, acct string
		wantState      string
		wantCode       string
		wantIdentity   string
	}{
		{"user id paid", "2088123412340001", "", app.RailPaid, "", ap.IdentityUserID},
		{"logon id paid", "payee0001@example.com", "Wang Fang", app.RailPaid, "", ap.IdentityLogonID},
		{"frozen", "2088123412340002", "", app.RailFailed, domain.FailAccountFrozen, ap.IdentityUserID},
		{"no such account", "13800000004", "Li Lei", app.RailFailed, domain.FailInvalidAccount, ap.IdentityLogonID},
		{"processing", "13800000005", "Li Lei", app.RailInTransit, "", ap.IdentityLogonID},
		{"logon id without a name", "13800000001", "", app.RailFailed, domain.FailInvalidAccount, ""},
	} {
		ref := "po_" + strings.ReplaceAll(tc.name, " ", "_")
		st, err := rail.Submit(ctx, transfer(ref, tc.id, tc.acct, "620.00"))
		if err != nil || st.State != tc.wantState || st.FailureCode != tc.wantCode {
			t.Errorf("%s: %+v %v, want %s %q", tc.name, st, err, tc.wantState, tc.wantCode)
			continue
		}
		calls, o := g.Transfers(ref)
		if tc.wantIdentity == "" {
			if calls != 0 || o != nil {
				t.Errorf("%s: sent to Alipay (%d calls) though it cannot be paid", tc.name, calls)
			}
			continue
		}
		if calls != 1 || o == nil || o.IdentityType != tc.wantIdentity || o.Amount != "620.00" {
			t.Errorf("%s: at the gateway %d calls, order %+v", tc.name, calls, o)
		}
	}
	usd := transfer("po_usd", "2088123412340001", "", "50.00")
	usd.Currency = "USD"
	if st, err := rail.Submit(ctx, usd); err != nil || st.State != app.RailFailed || st.FailureCode != domain.FailUnsupported {
		t.Errorf("a USD payout: %+v %v, want failed unsupported_by_rail", st, err)
	}
	if calls, _ := g.Transfers("po_usd"); calls != 0 {
		t.Errorf("a USD payout reached Alipay")
	}
	// The query reports trans_amount: what Alipay holds under the out_biz_no.
	if st, err := rail.Query(ctx, "po_user_id_paid"); err != nil || st.Currency != "CNY" || !st.Amount.Equal(decimal.RequireFromString("620.00")) {
		t.Errorf("query of the paid one: %+v %v, want 620.00 CNY", st, err)
	}
	if st, err := rail.Query(ctx, "po_frozen"); err != nil || st.State != app.RailFailed || st.FailureCode != domain.FailAccountFrozen ||
		!strings.HasPrefix(st.Message, "PAYEE_ACCOUNT_STATUS_ERROR") {
		t.Errorf("query of the frozen one: %+v %v", st, err)
	}
	for _, want := range []string{app.RailInTransit, app.RailPaid} { // DEALING, then settled
		if st, err := rail.Query(ctx, "po_processing"); err != nil || st.State != want {
			t.Errorf("query of the processing one: %+v %v, want %s", st, err, want)
		}
	}
	if _, err := rail.Query(ctx, "po_never_sent"); !errors.Is(err, app.ErrUnknownReference) {
		t.Errorf("query of an unknown out_biz_no: %v, want ErrUnknownReference", err)
	}
	if r := g.Refused(); len(r) != 0 {
		t.Errorf("the gateway refused requests: %v", r)
	}
}

// The same out_biz_no is the same order: a resubmission answers it and
// pays nothing more; with another amount the gateway refuses it and the
// rail reports an error, never a failed payout. A lost answer is an
// unknown outcome the query resolves.
func TestRailIdempotentByOutBizNo(t *testing.T) {
	t.Parallel()
	g, rail, _ := gateway(t)
	ctx := context.Background()
	for range 2 {
		if st, err := rail.Submit(ctx, transfer("po_same", "2088123412340001", "", "150.00")); err != nil || st.State != app.RailPaid {
			t.Fatalf("submit: %+v %v", st, err)
		}
	}
	if calls, o := g.Transfers("po_same"); calls != 2 || o == nil || o.Amount != "150.00" {
		t.Errorf("two submissions: %d calls, order %+v", calls, o)
	}
	st, err := rail.Submit(ctx, transfer("po_same", "2088123412340001", "", "151.00"))
	if err == nil || st.State == app.RailFailed || !strings.Contains(err.Error(), "PAYMENT_INFO_INCONSISTENCY") {
		t.Errorf("same out_biz_no, another amount: %+v %v", st, err)
	}

	g.LoseAnswers(1)
	if _, err := rail.Submit(ctx, transfer("po_lost", "2088123412340001", "", "300.00")); !errors.Is(err, app.ErrRailUnavailable) {
		t.Fatalf("lost answer: %v, want ErrRailUnavailable", err)
	}
	if st, err := rail.Query(ctx, "po_lost"); err != nil || st.State != app.RailPaid {
		t.Errorf("query after the lost answer: %+v %v", st, err)
	}
	if calls, _ := g.Transfers("po_lost"); calls != 1 {
		t.Errorf("po_lost: %d transfer calls", calls)
	}
}

// Signatures both ways: a request signed with a key the platform does not
// know is refused; an answer not signed by the platform's key is never
// taken as a result (the transfer it reports may exist: an error, so the
// workflow queries again rather than failing or paying the payout).
func TestRailSignatures(t *testing.T) {
	t.Parallel()
	g, rail, _ := gateway(t)
	ctx := context.Background()

	wrongApp := *rail.C
	wrongApp.Cfg.PrivateKey = key(t)
	r := &alipay.Rail{C: &wrongApp}
	if st, err := r.Submit(ctx, transfer("po_badreq", "2088123412340001", "", "200.00")); err == nil || st.State != "" {
		t.Errorf("request signed with an unknown key: %+v %v", st, err)
	}
	if calls, o := g.Transfers("po_badreq"); calls != 0 || o != nil {
		t.Errorf("the gateway booked a request whose signature does not verify")
	}
	if refused := g.Refused(); len(refused) != 1 || !strings.HasPrefix(refused[0], "isv.invalid-signature") {
		t.Errorf("gateway refusals %v", refused)
	}

	wrongPlatform := *rail.C
	wrongPlatform.Cfg.PlatformKey = &key(t).PublicKey
	r = &alipay.Rail{C: &wrongPlatform}
	st, err := r.Submit(ctx, transfer("po_badans", "2088123412340002", "", "200.00"))
	if !errors.Is(err, ap.ErrBadSignature) || st.State != "" {
		t.Errorf("answer not signed by the platform key: %+v %v", st, err)
	}
	if _, err := r.Query(ctx, "po_badans"); !errors.Is(err, ap.ErrBadSignature) {
		t.Errorf("query answer not signed by the platform key: %v", err)
	}
}
