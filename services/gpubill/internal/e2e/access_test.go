package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/gpubill/gpubill/pkg/auth"
)

// A caller in the access walk: a role, and for providers and renters whose
// token it is and whose ids its requests name.
type caller struct {
	name  string // column of the expected table
	role  string // "" = no token
	sub   string // token subject
	party string // the provider or renter id its requests name
}

const (
	pOwn, pOther = "p-own", "p-other"
	rOwn, rOther = "r-own", "r-other"
)

var callers = []caller{
	{name: "finance", role: auth.RoleFinance},
	{name: "auditor", role: auth.RoleAuditor},
	{name: "admin", role: auth.RoleAdmin},
	{name: "meter", role: auth.RoleMeter},
	{name: "service", role: auth.RoleService, sub: "settlement"},
	{name: "provider", role: auth.RoleProvider, sub: pOwn, party: pOwn},
	{name: "provider-other", role: auth.RoleProvider, sub: pOwn, party: pOther}, // asks for p-other's data
	{name: "renter", role: auth.RoleRenter, sub: rOwn, party: rOwn},
	{name: "renter-other", role: auth.RoleRenter, sub: rOwn, party: rOther},
	{name: "none"},
}

// expectedAccess is the authorisation table (DESIGN §7): who may call each
// RPC. A provider or renter column means "with its own ids"; the -other
// columns name another party's ids and are open only where no party data is
// involved. A new RPC must be added here (and to its service's Policy).
var expectedAccess = func() map[string][]string {
	staff := []string{"finance", "admin"}
	read := []string{"finance", "auditor", "admin"}
	every := []string{"finance", "auditor", "admin", "meter", "provider", "provider-other", "renter", "renter-other"}
	with := func(base []string, more ...string) []string { return slices.Concat(base, more) }
	m, pr, l, r, tx, po, st := "/gpubill.metering.v1.PartyService/", "/gpubill.pricing.v1.PricingService/",
		"/gpubill.ledger.v1.LedgerService/", "/gpubill.ledger.v1.ReportService/", "/gpubill.tax.v1.TaxService/",
		"/gpubill.payout.v1.PayoutService/", "/gpubill.settlement.v1.SettlementService/"
	u := "/gpubill.metering.v1.UsageService/"
	iv := "/gpubill.ledger.v1.InvoiceService/"
	gm := "/gpubill.metering.v1.GpuModelService/"
	wl, ch := "/gpubill.ledger.v1.WalletService/", "/gpubill.pricing.v1.ChargeService/"
	return map[string][]string{
		m + "CreateProvider":           staff,
		m + "GetProvider":              with(read, "provider"),
		m + "UpdateProvider":           staff,
		m + "ListProviders":            read,
		m + "CreateRenter":             staff,
		m + "UpdateRenter":             staff,
		m + "GetRenter":                with(read, "renter"),
		m + "ListRenters":              read,
		u + "IngestUsageEvents":        with(staff, "meter"),
		u + "ListUsageEvents":          with(read, "provider", "renter"),
		pr + "CreateRateCard":          staff,
		pr + "ListRateCards":           read,
		pr + "GetRateCard":             read,
		pr + "CreateQuote":             with(read, "provider", "renter", "renter-other"), // a named provider's own tax selection
		l + "CreateDeposit":            with(staff, "service"),
		l + "ListAccounts":             with(read, "provider", "renter"),
		l + "GetAccount":               with(read, "provider", "renter", "service"),
		l + "ListTransactions":         with(read, "provider", "renter", "service"),
		l + "GetTransaction":           with(read, "provider", "renter", "service"),
		l + "CreateTransaction":        with(staff, "service"),
		l + "ReverseTransaction":       staff,
		l + "ListCycleBalances":        {"service"},
		l + "CloseLedgerCycle":         {"service"},
		l + "ListStatementLines":       {"service"},
		r + "GetSegregatedFundsReport": {"finance", "auditor"},
		iv + "ListRenterInvoices":      with(read, "renter"),
		iv + "GetInvoice":              with(read, "renter"),
		iv + "IssueInvoices":           {"service"},
		pr + "ExplainCharges":          {"service"},
		"/gpubill.ledger.v1.BankStatementService/ImportBankStatement": {"finance"},
		"/gpubill.ledger.v1.BankStatementService/ListBankStatements":  {"finance", "auditor"},
		"/gpubill.ledger.v1.AuditService/ListAuditEvents":             {"finance", "auditor"},
		"/gpubill.ops.v1.DeadLetterService/ListDeadLetters":           staff,
		"/gpubill.ops.v1.DeadLetterService/ReplayDeadLetter":          staff,
		tx + "ListTaxWithholdings":                                    with(read, "provider"),
		tx + "GetWithholdingCertificate":                              with(read, "provider"),
		tx + "ComputeWithholding":                                     {"service"},
		tx + "QuoteWithholding":                                       {"service"},
		tx + "ListTaxRules":                                           every,
		tx + "SetRuleSelection":                                       staff,
		tx + "RemitTax":                                               with(staff, "service"),
		tx + "ListRemittances":                                        read,
		tx + "ListRemittanceLines":                                    read,
		po + "GetPayout":                                              {"finance", "admin", "provider"},
		po + "ListProviderPayouts":                                    {"finance", "admin", "provider"},
		po + "PutPayoutMethod":                                        {"finance", "admin", "provider"},
		po + "PutKyc":                                                 {"finance", "admin", "provider"},
		po + "GetPayoutMethod":                                        {"finance", "admin", "provider"},
		po + "CancelPayout":                                           staff,
		po + "RetryPayout":                                            staff,
		po + "ResolvePayoutAmountMismatch":                            staff,
		po + "SettlePayoutOutside":                                    staff,
		po + "HoldProviderPayouts":                                    staff,
		po + "CreateWebhook":                                          {"finance", "admin", "provider"},
		po + "ListWebhooks":                                           {"finance", "admin", "provider"},
		po + "RotateWebhookSecret":                                    {"finance", "admin", "provider"},
		po + "GetPayoutSettings":                                      {"finance", "admin", "auditor"},
		po + "UpdatePayoutSettings":                                   {"finance", "admin"},
		po + "ListWebhookDeliveries":                                  {"finance", "admin", "provider"},
		po + "DeleteWebhook":                                          {"finance", "admin", "provider"},
		po + "RedeliverWebhookDelivery":                               {"finance", "admin", "provider"},
		po + "ListPayoutBatches":                                      staff,
		po + "GetPayoutBatch":                                         staff,
		po + "GetPayoutBatchFile":                                     staff,
		po + "ImportBankFile":                                         staff,
		po + "GetBankFileRestoreHold":                                 staff,
		po + "ReleaseBankFileRestoreHold":                             staff,
		po + "ResolveBankTransfer":                                    staff,
		"/gpubill.payout.v1.TopUpService/CreateTopUp":                 {"finance", "admin", "renter"},
		st + "ListSettlementCycles":                                   read,
		st + "GetSettlementCycle":                                     read,
		st + "CloseSettlementCycle":                                   staff,
		st + "HoldProvider":                                           staff,
		st + "ReleaseProvider":                                        staff,
		st + "ListStatements":                                         with(read, "provider"),
		gm + "ListGpuModels":                                          every,
		gm + "CreateGpuModel":                                         {"admin"},
		wl + "GetRenterWallet":                                        with(read, "renter"),
		ch + "ListRenterCharges":                                      with(read, "renter"),
		// The bank reconciliation (the daily schedule runs as service).
		"/gpubill.ledger.v1.ReconciliationService/RunReconciliation":                 {"finance", "service"},
		"/gpubill.ledger.v1.ReconciliationService/ListReconciliations":               {"finance", "auditor"},
		"/gpubill.ledger.v1.ReconciliationService/GetReconciliation":                 {"finance", "auditor"},
		"/gpubill.ledger.v1.ReconciliationService/ListReconciliationItems":           {"finance", "auditor"},
		"/gpubill.ledger.v1.ReconciliationService/ListReconciliationStatementBreaks": {"finance", "auditor"},
		"/gpubill.ledger.v1.ReconciliationService/ListReconciliationCashDifferences": {"finance", "auditor"},
		"/gpubill.ledger.v1.ReconciliationService/ListReconciliationResolutions":     {"finance", "auditor"},
		"/gpubill.ledger.v1.ReconciliationService/ListReconciliationResolutionItems": {"finance", "auditor"},
		// Resolving items by hand is finance's; an auditor reads them on the run.
		"/gpubill.ledger.v1.ReconciliationService/ResolveReconciliationItems": {"finance"},
		// So is voiding a resolution (its items open again in the next run).
		"/gpubill.ledger.v1.ReconciliationService/VoidReconciliationResolution": {"finance"},
	}
}()

// TestAccessEveryRPCEveryRole walks every RPC the stack serves (taken from
// the registered gRPC services, so an RPC added without a policy or without
// a row here fails) with every role, a provider and a renter asking for
// their own and for another's data, and no token, through the real
// interceptor and handlers; any call that gets through where the table says
// no (a leak) or is refused where it says yes (a gap) fails.
func TestAccessEveryRPCEveryRole(t *testing.T) {
	f := newFixture(t)
	for _, p := range []string{pOwn, pOther} {
		f.mustDo(http.MethodPost, "/v1/providers", map[string]any{"provider_id": p, "name": p, "tier": "standard",
			"tax_profile": "individual", "jurisdiction": "CN", "currency": "CNY"})
	}
	depositTx := map[string]string{}
	for _, r := range []string{rOwn, rOther} {
		f.mustDo(http.MethodPost, "/v1/renters", map[string]any{"renter_id": r, "name": r, "currency": "CNY", "credit_limit": "0"})
		out := f.mustDo(http.MethodPost, "/v1/deposits", map[string]any{"renter_id": r, "amount": "10.00", "currency": "CNY", "external_ref": "ref-" + r})
		depositTx[r] = out["transaction_id"].(string)
	}

	conn, err := grpc.NewClient(f.st.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tokens := map[string]string{}
	for _, c := range callers {
		if c.role != "" {
			if tokens[c.name], err = auth.Issue([]byte(secret), c.role, c.sub, time.Hour); err != nil {
				t.Fatal(err)
			}
		}
	}

	var served []string
	for _, m := range f.st.Methods() {
		if !auth.IsPublic(m) {
			served = append(served, m)
		}
	}
	for m := range expectedAccess {
		if !slices.Contains(served, m) {
			t.Errorf("%s is in the expected table but not served", m)
		}
	}
	var problems []string
	for _, method := range served {
		allowed, ok := expectedAccess[method]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s is served but has no row in expectedAccess (and needs a Policy entry)", method))
			continue
		}
		md := methodDesc(t, method)
		for _, c := range callers {
			req := fillRequest(md.Input(), c, depositTx)
			resp := newMessage(t, md.Output())
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if c.role != "" {
				ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tokens[c.name])
			}
			code := status.Code(conn.Invoke(ctx, method, req, resp))
			cancel()
			if p := judge(c, slices.Contains(allowed, c.name), code); p != "" {
				problems = append(problems, fmt.Sprintf("%s as %s: %s (got %v)", method, c.name, p, code))
			}
		}
	}
	sort.Strings(problems)
	for _, p := range problems {
		t.Error(p)
	}
	if len(served) < len(expectedAccess) {
		t.Fatalf("only %d RPCs served", len(served))
	}
	t.Logf("walked %d RPCs × %d callers", len(served), len(callers))
}

// judge returns "" when code is what the table expects of caller c.
func judge(c caller, allowed bool, code codes.Code) string {
	refused := code == codes.PermissionDenied || code == codes.Unauthenticated
	other := strings.HasSuffix(c.name, "-other")
	switch {
	case c.role == "" && code != codes.Unauthenticated:
		return "leak: a call without a token must be 401 (Unauthenticated)"
	case c.role == "":
		return ""
	case allowed && refused:
		return "gap: the table allows this caller"
	case allowed:
		return ""
	case other && (code == codes.PermissionDenied || code == codes.NotFound):
		return "" // someone else's data: 403 or 404 (DESIGN §7)
	case code != codes.PermissionDenied:
		return "leak: the table refuses this caller, want 403 (PermissionDenied)"
	}
	return ""
}

func methodDesc(t *testing.T, method string) protoreflect.MethodDescriptor {
	t.Helper()
	svc, name, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	md := d.(protoreflect.ServiceDescriptor).Methods().ByName(protoreflect.Name(name))
	if md == nil || md.IsStreamingClient() || md.IsStreamingServer() {
		t.Fatalf("%s: not a unary method of %s", method, svc)
	}
	return md
}

func newMessage(t *testing.T, d protoreflect.MessageDescriptor) proto.Message {
	t.Helper()
	mt, err := protoregistry.GlobalTypes.FindMessageByName(d.FullName())
	if err != nil {
		t.Fatal(err)
	}
	return mt.New().Interface()
}

// fillRequest names the caller's party (its own or another's) in every id
// field a request has, so the handlers' ownership checks are exercised;
// staff callers name p-own / r-own.
func fillRequest(d protoreflect.MessageDescriptor, c caller, depositTx map[string]string) proto.Message {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(d.FullName())
	if err != nil {
		panic(fmt.Sprintf("request type %s not registered: %v", d.FullName(), err))
	}
	msg := mt.New()
	provider, renter := pOwn, rOwn
	account, prefix := "renter:"+rOwn+":wallet", ""
	switch c.role {
	case auth.RoleProvider:
		provider, renter = c.party, ""
		account, prefix = "provider:"+c.party+":available", "provider:"+c.party+":"
	case auth.RoleRenter:
		provider, renter = "", c.party
		account, prefix = "renter:"+c.party+":wallet", "renter:"+c.party+":"
	}
	txID := depositTx[rOwn]
	if c.role == auth.RoleRenter {
		txID = depositTx[c.party]
	}
	values := map[protoreflect.Name]string{"provider_id": provider, "renter_id": renter, "address": account,
		"account": account, "prefix": prefix, "transaction_id": txID, "cycle_id": "cyc-20260101",
		"invoice_id": "inv-none"}
	var fill func(m protoreflect.Message, depth int)
	fill = func(m protoreflect.Message, depth int) {
		fields := m.Descriptor().Fields()
		for i := 0; i < fields.Len(); i++ {
			fd := fields.Get(i)
			switch {
			case fd.IsList() || fd.IsMap():
			case fd.Kind() == protoreflect.StringKind:
				if v := values[fd.Name()]; v != "" {
					m.Set(fd, protoreflect.ValueOfString(v))
				}
			case fd.Kind() == protoreflect.MessageKind && depth == 0 && fd.Message().FullName().Parent() != "google.protobuf":
				fill(m.Mutable(fd).Message(), depth+1)
			}
		}
	}
	fill(msg, 0)
	return msg.Interface()
}
