// Package fakeledger is an in-memory LedgerService for settlement's tests and
// benchmark: balanced, idempotent transactions (a replay returns the
// original; the same key with another body is ALREADY_EXISTS), per-account
// balances, cycle balances and cycle closing. It also serves a TaxService
// double that splits with pkg/split (flat20, CN), for tests that do not host
// the real tax service.
package fakeledger

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/pkg/split"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	taxv1 "github.com/gpubill/gpubill/proto/gen/gpubill/tax/v1"
)

// Ledger is the fake ledger.
type Ledger struct {
	ledgerv1.UnimplementedLedgerServiceServer
	mu       sync.Mutex
	txs      []*ledgerv1.Transaction
	byKey    map[string]*ledgerv1.Transaction
	byAcct   map[string][]*ledgerv1.Transaction
	requests map[string]int                        // CreateTransaction calls per key (replays included)
	balances map[string]map[string]decimal.Decimal // account → currency → credits − debits
	closed   map[string]time.Time
	// pending is each cycle's provider pending balances (provider|currency
	// keys), sorted when a ListCycleBalances page needs it: sorting every
	// balance on every page made a 100 000-provider snapshot quadratic.
	pending map[string]*cyclePending
	// unbilled is each pending account's charges billed at 0.00 (Unbilled).
	unbilled map[string][]unbilledCharge
	Delay    time.Duration    // added to every CreateTransaction (to stretch a close)
	refused  map[string]error // CreateTransaction's answer for a key, until Refuse(key, nil)
}

// Refuse makes CreateTransaction answer err for key (nil: post it again).
func (l *Ledger) Refuse(key string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refused == nil {
		l.refused = map[string]error{}
	}
	if err == nil {
		delete(l.refused, key)
		return
	}
	l.refused[key] = err
}

type cyclePending struct {
	keys   []pendingKey
	sorted bool
}

type pendingKey struct{ provider, currency, account string }

func (k pendingKey) token() string { return k.provider + "|" + k.currency }

// New returns an empty ledger.
func New() *Ledger {
	return &Ledger{byKey: map[string]*ledgerv1.Transaction{}, byAcct: map[string][]*ledgerv1.Transaction{}, requests: map[string]int{},
		balances: map[string]map[string]decimal.Decimal{}, closed: map[string]time.Time{}, pending: map[string]*cyclePending{}}
}

// Charge posts a usage charge: Dr renter:{renter}:wallet, Cr provider:{p}:pending:{cycle}.
func (l *Ledger) Charge(provider, cycle, currency, amount string) {
	_, err := l.CreateTransaction(context.Background(), &ledgerv1.CreateTransactionRequest{
		IdempotencyKey: fmt.Sprintf("charge-%s-%s-%s-%d", provider, cycle, currency, len(l.txs)),
		Description:    "usage charge",
		Metadata:       map[string]string{"lease_id": "lease-" + provider, "renter_id": "r-1", "gpu_model": "RTX_4090", "gpu_hours": "1"},
		Postings: []*ledgerv1.Posting{
			{Account: ids.RenterWallet("r-1"), Direction: "debit", Amount: amount, Currency: currency},
			{Account: ids.ProviderPending(provider, cycle), Direction: "credit", Amount: amount, Currency: currency},
		},
	})
	if err != nil {
		panic(err)
	}
}

type unbilledCharge struct{ currency, lease, gpuHours string }

// Unbilled records a usage charge billed at 0.00 as the ledger does: no
// transaction (nothing moves), its provider's pending account listed in the
// cycle (at 0 without a posting) and its GPU-hours on its lease's statement
// line.
func (l *Ledger) Unbilled(provider, cycle, currency, gpuHours string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	account := ids.ProviderPending(provider, cycle)
	if _, ok := l.balances[account][currency]; !ok {
		if l.balances[account] == nil {
			l.balances[account] = map[string]decimal.Decimal{}
		}
		l.balances[account][currency] = decimal.Zero
		l.notePending(account, currency)
	}
	if l.unbilled == nil {
		l.unbilled = map[string][]unbilledCharge{}
	}
	l.unbilled[account] = append(l.unbilled[account], unbilledCharge{currency: currency, lease: "lease-" + provider, gpuHours: gpuHours})
}

// CreateTransaction implements LedgerService.
func (l *Ledger) CreateTransaction(_ context.Context, req *ledgerv1.CreateTransactionRequest) (*ledgerv1.CreateTransactionResponse, error) {
	if l.Delay > 0 {
		time.Sleep(l.Delay)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.requests[req.IdempotencyKey]++
	if err := l.refused[req.IdempotencyKey]; err != nil {
		return nil, err
	}
	if prev, ok := l.byKey[req.IdempotencyKey]; ok {
		if !proto.Equal(&ledgerv1.CreateTransactionRequest{IdempotencyKey: prev.IdempotencyKey, Description: prev.Description, Metadata: prev.Metadata, Postings: prev.Postings},
			&ledgerv1.CreateTransactionRequest{IdempotencyKey: req.IdempotencyKey, Description: req.Description, Metadata: req.Metadata, Postings: req.Postings}) {
			return nil, status.Errorf(codes.Aborted, "idempotency key %s reused with another body", req.IdempotencyKey)
		}
		return &ledgerv1.CreateTransactionResponse{Transaction: prev}, nil
	}
	sums := map[string]decimal.Decimal{}
	for _, p := range req.Postings {
		amt, err := decimal.NewFromString(p.Amount)
		if err != nil || !amt.IsPositive() {
			return nil, status.Errorf(codes.InvalidArgument, "posting amount %q", p.Amount)
		}
		if p.Direction == "debit" {
			amt = amt.Neg()
		}
		sums[p.Currency] = sums[p.Currency].Add(amt)
	}
	for cur, s := range sums {
		if !s.IsZero() {
			return nil, status.Errorf(codes.InvalidArgument, "postings in %s do not balance (%s)", cur, s)
		}
	}
	for _, p := range req.Postings {
		amt := decimal.RequireFromString(p.Amount)
		if p.Direction == "debit" {
			amt = amt.Neg()
		}
		if l.balances[p.Account] == nil {
			l.balances[p.Account] = map[string]decimal.Decimal{}
		}
		if _, ok := l.balances[p.Account][p.Currency]; !ok {
			l.notePending(p.Account, p.Currency)
		}
		l.balances[p.Account][p.Currency] = l.balances[p.Account][p.Currency].Add(amt)
	}
	tx := &ledgerv1.Transaction{TransactionId: fmt.Sprintf("tx-%d", len(l.txs)+1), IdempotencyKey: req.IdempotencyKey,
		Description: req.Description, Metadata: req.Metadata, Postings: req.Postings, CreatedAt: timestamppb.Now()}
	l.txs = append(l.txs, tx)
	l.byKey[req.IdempotencyKey] = tx
	for _, p := range req.Postings {
		if n := len(l.byAcct[p.Account]); n == 0 || l.byAcct[p.Account][n-1] != tx {
			l.byAcct[p.Account] = append(l.byAcct[p.Account], tx)
		}
	}
	return &ledgerv1.CreateTransactionResponse{Transaction: tx}, nil
}

// notePending records a new balance if it is a provider's pending one.
func (l *Ledger) notePending(account, currency string) {
	a, err := ids.ParseAddress(account)
	if err != nil || a.Class != ids.ClassProvider || a.Sub != ids.SubPending {
		return
	}
	cp := l.pending[a.Cycle]
	if cp == nil {
		cp = &cyclePending{}
		l.pending[a.Cycle] = cp
	}
	cp.keys = append(cp.keys, pendingKey{provider: a.Party, currency: currency, account: account})
	cp.sorted = false
}

// ListCycleBalances implements LedgerService (page token: the last provider|currency).
func (l *Ledger) ListCycleBalances(_ context.Context, req *ledgerv1.ListCycleBalancesRequest) (*ledgerv1.ListCycleBalancesResponse, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	resp := &ledgerv1.ListCycleBalancesResponse{}
	cp := l.pending[req.CycleId]
	if cp == nil {
		return resp, nil
	}
	if !cp.sorted {
		sort.Slice(cp.keys, func(i, j int) bool { return cp.keys[i].token() < cp.keys[j].token() })
		cp.sorted = true
	}
	all := cp.keys
	start := sort.Search(len(all), func(i int) bool { return all[i].token() > req.PageToken })
	n := int(req.PageSize)
	if n <= 0 {
		n = 100
	}
	end := min(start+n, len(all))
	for _, k := range all[start:end] {
		resp.Balances = append(resp.Balances, &ledgerv1.CycleBalance{ProviderId: k.provider, Currency: k.currency, Amount: l.balances[k.account][k.currency].String()})
	}
	if end < len(all) {
		resp.NextPageToken = all[end-1].token()
	}
	return resp, nil
}

// CloseLedgerCycle implements LedgerService.
func (l *Ledger) CloseLedgerCycle(_ context.Context, req *ledgerv1.CloseLedgerCycleRequest) (*ledgerv1.CloseLedgerCycleResponse, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.closed[req.CycleId]; !ok {
		l.closed[req.CycleId] = time.Now()
	}
	return &ledgerv1.CloseLedgerCycleResponse{CycleId: req.CycleId, ClosedAt: timestamppb.New(l.closed[req.CycleId])}, nil
}

// ListTransactions implements LedgerService (one page, by account, by
// idempotency keys or by transaction ids).
func (l *Ledger) ListTransactions(_ context.Context, req *ledgerv1.ListTransactionsRequest) (*ledgerv1.ListTransactionsResponse, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	resp := &ledgerv1.ListTransactionsResponse{}
	txs := l.txs
	if req.Account != "" {
		txs = l.byAcct[req.Account]
	}
	if len(req.TransactionIds) > 0 {
		for _, tx := range l.txs {
			if slices.Contains(req.TransactionIds, tx.TransactionId) {
				resp.Transactions = append(resp.Transactions, tx)
			}
		}
		return resp, nil
	}
	if len(req.IdempotencyKeys) > 0 {
		for _, tx := range txs {
			if slices.Contains(req.IdempotencyKeys, tx.IdempotencyKey) {
				resp.Transactions = append(resp.Transactions, tx)
			}
		}
		return resp, nil
	}
	for _, tx := range txs {
		resp.Transactions = append(resp.Transactions, tx)
		if len(resp.Transactions) == int(req.PageSize) {
			break
		}
	}
	return resp, nil
}

// ListStatementLines implements LedgerService as the ledger does: the
// account's postings in the currency, the excluded transactions left out,
// summed per lease, renter and GPU model (credits naming a lease whose entry
// has a charge's shape: chargeShaped), every other posting a line of its own
// (debits negative), in the order each line first appears. A line of its own
// carries its entry's description and renter_id only when every posting of
// the entry is on the provider's own accounts (the ledger's
// domain.PartyReadsWhole).
func (l *Ledger) ListStatementLines(_ context.Context, req *ledgerv1.ListStatementLinesRequest) (*ledgerv1.ListStatementLinesResponse, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	cur, err := money.Lookup(req.Currency)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	type sum = lineSum
	var order []*sum
	byLease := map[[3]string]*sum{}
	own, _, _ := strings.Cut(req.Account, "pending:") // "provider:{id}:"
	for _, tx := range l.byAcct[req.Account] {
		if slices.Contains(req.ExcludeTransactionIds, tx.TransactionId) {
			continue
		}
		md := tx.Metadata
		for _, p := range tx.Postings {
			if p.Account != req.Account || p.Currency != cur.Code {
				continue
			}
			amt := decimal.RequireFromString(p.Amount)
			if p.Direction != "credit" || md["lease_id"] == "" || !chargeShaped(own, md["renter_id"], tx) {
				if p.Direction != "credit" {
					amt = amt.Neg()
				}
				line := &ledgerv1.StatementLine{Postings: 1, TransactionId: tx.TransactionId}
				if ownEntry(own, tx) {
					line.RenterId, line.Description = md["renter_id"], tx.Description
				}
				order = append(order, &sum{line: line, amount: amt})
				continue
			}
			k := [3]string{md["lease_id"], md["renter_id"], md["gpu_model"]}
			s := byLease[k]
			if s == nil {
				s = &sum{line: &ledgerv1.StatementLine{LeaseId: k[0], RenterId: k[1], GpuModel: k[2]}}
				byLease[k] = s
				order = append(order, s)
			}
			s.amount, s.line.Postings = s.amount.Add(amt), s.line.Postings+1
			if h, err := decimal.NewFromString(md["gpu_hours"]); err == nil {
				if s.hours == nil {
					s.hours = &decimal.Zero
				}
				total := s.hours.Add(h)
				s.hours = &total
			}
		}
	}
	order = l.addUnbilled(req.Account, cur.Code, byLease, order)
	resp := &ledgerv1.ListStatementLinesResponse{}
	for _, s := range order {
		s.line.Amount = cur.Format(s.amount)
		if s.hours != nil {
			s.line.GpuHours = s.hours.String()
		}
		resp.Lines = append(resp.Lines, s.line)
	}
	return resp, nil
}

// lineSum is one statement line being summed.
type lineSum struct {
	line   *ledgerv1.StatementLine
	amount decimal.Decimal
	hours  *decimal.Decimal
}

// addUnbilled adds the GPU-hours of account's charges billed at 0.00 in
// currency to their leases' lines (no amount, no posting), new lines after
// order's.
func (l *Ledger) addUnbilled(account, currency string, byLease map[[3]string]*lineSum, order []*lineSum) []*lineSum {
	for _, u := range l.unbilled[account] {
		if u.currency != currency {
			continue
		}
		k := [3]string{u.lease, "r-1", "RTX_4090"}
		s := byLease[k]
		if s == nil {
			s = &lineSum{line: &ledgerv1.StatementLine{LeaseId: k[0], RenterId: k[1], GpuModel: k[2]}}
			byLease[k] = s
			order = append(order, s)
		}
		if h, err := decimal.NewFromString(u.gpuHours); err == nil {
			total := h
			if s.hours != nil {
				total = s.hours.Add(h)
			}
			s.hours = &total
		}
	}
	return order
}

// Balance returns an account's credits − debits in a currency.
func (l *Ledger) Balance(account, currency string) decimal.Decimal {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.balances[account][currency]
}

// Closed reports whether the cycle was closed.
func (l *Ledger) Closed(cycle string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.closed[cycle]
	return ok
}

// Transactions returns the posted transactions whose key has the prefix.
func (l *Ledger) Transactions(keyPrefix string) []*ledgerv1.Transaction {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*ledgerv1.Transaction
	for _, tx := range l.txs {
		if strings.HasPrefix(tx.IdempotencyKey, keyPrefix) {
			out = append(out, tx)
		}
	}
	return out
}

// Requests returns how many CreateTransaction calls carried keys with the prefix.
func (l *Ledger) Requests(keyPrefix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for k, c := range l.requests {
		if strings.HasPrefix(k, keyPrefix) {
			n += c
		}
	}
	return n
}

// Tax is a TaxService double: pkg/split with flat20, every provider an
// individual in CN; idempotent on the key.
type Tax struct {
	taxv1.UnimplementedTaxServiceServer
	mu       sync.Mutex
	byKey    map[string]*taxv1.ComputeWithholdingResponse
	closedAt map[string]time.Time // by key: the closed_at each request named (zero: none)
}

// ClosedAt returns the closed_at the last request under key named, and
// whether a request under key came.
func (t *Tax) ClosedAt(key string) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.closedAt[key]
	return at, ok
}

// ComputeWithholding implements TaxService.
func (t *Tax) ComputeWithholding(_ context.Context, req *taxv1.ComputeWithholdingRequest) (*taxv1.ComputeWithholdingResponse, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byKey == nil {
		t.byKey, t.closedAt = map[string]*taxv1.ComputeWithholdingResponse{}, map[string]time.Time{}
	}
	t.closedAt[req.IdempotencyKey] = time.Time{}
	if req.ClosedAt != nil {
		t.closedAt[req.IdempotencyKey] = req.ClosedAt.AsTime()
	}
	if r, ok := t.byKey[req.IdempotencyKey]; ok {
		return r, nil
	}
	cur, err := money.Lookup(req.Currency)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	gross, err := cur.Parse(req.Gross)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	rule, err := split.RuleFor(split.RuleSetFlat20)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	r, err := split.Compute(cur, gross, decimal.RequireFromString(req.CommissionRate), rule, split.ProfileIndividual)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	resp := &taxv1.ComputeWithholdingResponse{
		TaxWithheld: cur.Format(r.Tax), RuleSet: split.RuleSetFlat20, RuleVersion: "1", TaxableBase: cur.Format(r.TaxBase),
		WithholdingId: "wh-" + req.IdempotencyKey, Currency: cur.Code, Commission: cur.Format(r.Commission), Net: cur.Format(r.Net),
		TaxProfile: split.ProfileIndividual, Jurisdiction: "CN", CertificateId: "cert-" + req.IdempotencyKey,
	}
	t.byKey[req.IdempotencyKey] = resp
	return resp, nil
}

// Serve serves the ledger (and tax, when not nil, and whatever register
// adds) on 127.0.0.1:0 until the test ends and returns a client connection to it.
func Serve(t testing.TB, l *Ledger, tax taxv1.TaxServiceServer, register ...func(grpc.ServiceRegistrar)) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	ledgerv1.RegisterLedgerServiceServer(gs, l)
	if tax != nil {
		taxv1.RegisterTaxServiceServer(gs, tax)
	}
	for _, r := range register {
		r(gs)
	}
	go func() {
		// Serve returns nil once Stop is called; anything else ends the fake early.
		if err := gs.Serve(lis); err != nil {
			t.Errorf("fake ledger: %v", err)
		}
	}()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// ownEntry: every posting of tx is on an account beginning with prefix.
// chargeShaped: every posting of tx is on the provider's own accounts
// (prefix) or on the wallet of renter, as the ledger asks before it sums a
// credit into a lease's line.
func chargeShaped(prefix, renter string, tx *ledgerv1.Transaction) bool {
	for _, p := range tx.Postings {
		if !strings.HasPrefix(p.Account, prefix) && p.Account != "renter:"+renter+":wallet" {
			return false
		}
	}
	return true
}

func ownEntry(prefix string, tx *ledgerv1.Transaction) bool {
	for _, p := range tx.Postings {
		if !strings.HasPrefix(p.Account, prefix) {
			return false
		}
	}
	return len(tx.Postings) > 0
}
