package ledger_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gpubill/gpubill/pkg/audit"
	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/server"
	"github.com/gpubill/gpubill/pkg/testkit"
)

// commitLoss loses, once armed, the server's answer to the first COMMIT it
// sees on a connection of the pool: the transaction has committed on the
// server, and the client reads nothing more on that connection until its
// context ends (a network that drops the answer).
type commitLoss struct {
	armed atomic.Bool
	fired atomic.Int32
}

type lossyConn struct {
	net.Conn
	loss *commitLoss
	lost bool
}

// commandCompleteCommit is the server's CommandComplete of a COMMIT.
var commandCompleteCommit = []byte("COMMIT\x00")

func (c *lossyConn) Read(b []byte) (int, error) {
	for {
		n, err := c.Conn.Read(b)
		if !c.lost && n > 0 && bytes.Contains(b[:n], commandCompleteCommit) && c.loss.armed.CompareAndSwap(true, false) {
			c.lost = true
			c.loss.fired.Add(1)
		}
		if !c.lost || err != nil {
			return n, err
		}
		// Lost: read on and drop, until the client's deadline (its
		// context's end) ends the read.
	}
}

// newLossyFixture is a fixture whose ledger reaches its database through
// connections that lose a COMMIT's answer once loss is armed.
func newLossyFixture(t *testing.T) (*fixture, *commitLoss) {
	t.Helper()
	base, _ := testkit.NewPool(t)
	cfg := base.Config()
	loss := &commitLoss{}
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &lossyConn{Conn: c, loss: loss}, nil
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return newFixtureOn(t, pool, nil, clock.System{}), loss
}

// A write its group commit answered 503 (the group's time ran out) that
// committed all the same (the COMMIT's answer was lost on the way back)
// is in the audit log twice under its request id, each once: what the
// caller was told (Unavailable) and what the write did (OK, with its
// transaction id, committed with the write). The write takes the path of
// one whose caller left (TestAuditRecordOfAWriteItsCallerLeft), but here
// the group itself gave up: a deposit and a plain entry commit in
// Store.PostNew's one round trip, an entry to a cycle's pending account in
// a transaction of its own (postOne). Were the write's own record lost
// (the interceptor's answer stored under its event id first, the write's
// dropped as its repeat) or doubled, the log would say the write never
// went through, or went through twice.
func TestAuditRecordOfAWriteItsGroupAnswered503(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, method, path, body, key string
		give, then                    []string // resource ids the OK record names before and after its transaction's
	}{
		{"deposit", "CreateDeposit", "/v1/deposits", `{"renter_id":"r-1","amount":"100.00","currency":"USD","external_ref":"dep-1"}`,
			"deposit:dep-1", []string{"renter_id=r-1", "amount=100.00", "currency=USD", "external_ref=dep-1"}, []string{"idempotency_key=deposit:dep-1"}},
		{"entry", "CreateTransaction", "/v1/transactions", `{"idempotency_key":"m-1","postings":[
			{"account":"bank:client","direction":"debit","amount":"100.00","currency":"USD"},
			{"account":"renter:r-1:wallet","direction":"credit","amount":"100.00","currency":"USD"}]}`,
			"m-1", []string{"idempotency_key=m-1"}, nil},
		{"entry to a cycle", "CreateTransaction", "/v1/transactions", `{"idempotency_key":"m-2","postings":[
			{"account":"bank:client","direction":"debit","amount":"100.00","currency":"USD"},
			{"account":"provider:p-1:pending:cyc-20261112","direction":"credit","amount":"100.00","currency":"USD"}]}`,
			"m-2", []string{"idempotency_key=m-2"}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, loss := newLossyFixture(t)
			f.app.GroupTimeout = time.Second
			store := &countingStore{PoolStore: audit.PoolStore{Pool: f.pool}}
			base, secret := startServer(t, f, func(o *server.Options) {
				o.Audit = audit.New(store, slog.Default(), "ledger")
			})
			tok, err := auth.Issue(secret, auth.RoleFinance, "alice", time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			c := restClient{t: t, base: base, token: tok}
			// Accounts and prepared statements first: the write under test
			// is the only one that commits while the loss is armed.
			if code, body := c.do("POST", "/v1/deposits", `{"renter_id":"r-0","amount":"1.00","currency":"USD","external_ref":"warm"}`); code != 200 {
				t.Fatalf("warm-up deposit: %d %s", code, body)
			}

			loss.armed.Store(true)
			code, body := c.do("POST", tt.path, tt.body)
			if loss.fired.Load() != 1 {
				t.Fatalf("POST %s: %d %s; the COMMIT's answer was lost %d times, want once: the fault proved nothing", tt.path, code, body, loss.fired.Load())
			}
			if code != 503 {
				t.Fatalf("POST %s: %d %s; want 503 (its group's time ran out)", tt.path, code, body)
			}
			if n := f.count(t, `select count(*) from ledger.transactions where idempotency_key = $1`, tt.key); n != 1 {
				t.Fatalf("%s in the journal %d times, want once (committed though answered 503)", tt.key, n)
			}
			var txID string
			if err := f.pool.QueryRow(f.ctx, `select id from ledger.transactions where idempotency_key = $1`, tt.key).Scan(&txID); err != nil {
				t.Fatal(err)
			}

			var ok, unavailable []string
			log := auditLog(t, f, tt.method)
			for _, e := range log {
				t.Logf("%s actor=%s code=%s ids=%v request=%s", e.Method, e.Actor, e.Code, e.ResourceIDs, e.RequestID)
				if slices.Contains(e.ResourceIDs, "external_ref=warm") {
					continue
				}
				switch e.Code {
				case "OK":
					ok = append(ok, e.RequestID)
				case "Unavailable":
					unavailable = append(unavailable, e.RequestID)
				default:
					t.Fatalf("record %+v; want OK or Unavailable", e)
				}
			}
			if len(ok) != 1 || len(unavailable) != 1 || ok[0] != unavailable[0] || ok[0] == "" {
				t.Fatalf("audit log: OK under %v, Unavailable under %v; want one of each, under the request's id", ok, unavailable)
			}
			want := append(append(slices.Clone(tt.give), "transaction_id="+txID), tt.then...)
			for _, e := range log {
				if e.Code == "OK" && !slices.Contains(e.ResourceIDs, "external_ref=warm") {
					if e.Actor != "alice" || !slices.Equal(slices.Sorted(slices.Values(e.ResourceIDs)), slices.Sorted(slices.Values(want))) {
						t.Fatalf("the write's record %+v; want by alice naming %v", e, want)
					}
				}
			}
		})
	}
}
