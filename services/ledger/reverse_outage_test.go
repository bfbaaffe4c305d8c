package ledger_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
)

// keyOutageStore is the ledger's store whose idempotency-key reads fail as
// a database that dropped the connection does, once failing is set.
type keyOutageStore struct {
	app.Store
	failing atomic.Bool
	calls   atomic.Int64
}

func (s *keyOutageStore) TxByKey(ctx context.Context, key string) (string, []byte, error) {
	if s.failing.Load() {
		s.calls.Add(1)
		return "", nil, &pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command",
			Detail: "select id::text, request_hash from ledger.transactions"}
	}
	return s.Store.TxByKey(ctx, key)
}

// A repeated reversal whose read of the key's transaction failed (the
// database restarting) was answered 409 "already reversed": the caller
// took the reversal as another key's and gave up, when asking again would
// have returned its own. It is a 503 to retry, with no internals; once the
// database answers, the same request returns the reversal.
func TestRepeatedReversalOnADatabaseOutageIsUnavailable(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	dep := f.deposit(t, "r-1", "50", "CNY", "ref-outage")
	rev, err := f.app.ReverseTransaction(f.ctx, app.ReverseInput{TransactionID: dep.ID})
	if err != nil {
		t.Fatal(err)
	}
	store := &keyOutageStore{Store: f.app.Store}
	f.app.Store = store // before the server starts: no request reads it concurrently
	base, secret := startServer(t, f)
	tok, err := auth.Issue(secret, auth.RoleFinance, "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c := restClient{t: t, base: base, token: tok}

	store.failing.Store(true)
	code, body := c.do("POST", "/v1/transactions/"+dep.ID+":reverse", `{}`)
	if store.calls.Load() == 0 {
		t.Fatal("the repeated reversal never read its key: the outage was not injected")
	}
	if code != 503 || strings.Contains(body, "already reversed") || strings.Contains(body, "ledger.transactions") ||
		strings.Contains(body, "administrator") {
		t.Errorf("repeated reversal while the database is down: %d %s; want 503 with no internals", code, body)
	}

	store.failing.Store(false)
	if code, body = c.do("POST", "/v1/transactions/"+dep.ID+":reverse", `{}`); code != 200 || !strings.Contains(body, rev.ID) {
		t.Errorf("repeated reversal once the database answers: %d %s; want 200 with %s", code, body, rev.ID)
	}
	if code, body = c.do("POST", "/v1/transactions/"+dep.ID+":reverse", `{"idempotency_key":"another"}`); code != 409 || !strings.Contains(body, "already reversed") {
		t.Errorf("reversal under another key: %d %s; want 409 already reversed", code, body)
	}
}
