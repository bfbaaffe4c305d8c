package stmtcache

import (
	"database/sql"
	"path/filepath"
	"testing"
)

// Through the cache: a statement runs many times from one prepared copy;
// the same query run while its rows are still open (nested) gets its own
// statement; a failed statement (a unique violation, as Temporal's
// conditional inserts expect) is dropped and the next call prepares afresh;
// transactions see their own writes.
func TestStatementCache(t *testing.T) {
	if err := Install(); err != nil {
		t.Fatal(err)
	}
	if err := Install(); err != nil { // idempotent
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // as Temporal's SQLite plugin: one connection, every statement on it
	if _, err := db.Exec(`create table kv (k integer primary key, v text not null)`); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if _, err := db.Exec(`insert into kv (k, v) values (?, ?)`, i, "v"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(`insert into kv (k, v) values (?, ?)`, 7, "dup"); err == nil {
		t.Fatal("duplicate key accepted")
	}
	if _, err := db.Exec(`insert into kv (k, v) values (?, ?)`, 100, "after the failure"); err != nil {
		t.Fatalf("insert after a failed one: %v", err)
	}

	conn, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const q = `select k from kv where k < ? order by k`
	outer, err := conn.QueryContext(t.Context(), q, 3)
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for outer.Next() {
		var k int
		if err := outer.Scan(&k); err != nil {
			t.Fatal(err)
		}
		inner, err := conn.QueryContext(t.Context(), q, k+1) // same SQL, rows of the first still open
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for inner.Next() {
			n++
		}
		if err := inner.Close(); err != nil {
			t.Fatal(err)
		}
		if n != k+1 {
			t.Fatalf("inner query for k < %d saw %d rows", k+1, n)
		}
		got = append(got, k)
	}
	if err := outer.Close(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("outer rows = %v", got)
	}

	tx, err := conn.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`update kv set v = ? where k = ?`, "in tx", 5); err != nil {
		t.Fatal(err)
	}
	var v string
	if err := tx.QueryRow(`select v from kv where k = ?`, 5).Scan(&v); err != nil || v != "in tx" {
		t.Fatalf("read in tx = %q, %v", v, err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRowContext(t.Context(), `select v from kv where k = ?`, 5).Scan(&v); err != nil || v != "v" {
		t.Fatalf("after rollback = %q, %v", v, err)
	}
	var n int
	if err := conn.QueryRowContext(t.Context(), `select count(*) from kv`).Scan(&n); err != nil || n != 101 {
		t.Fatalf("rows = %d, %v", n, err)
	}
	// The connection really is the caching one, and it holds the statements.
	if err := conn.Raw(func(dc any) error {
		c, ok := dc.(*cachingConn)
		if !ok {
			t.Fatalf("driver connection is %T, not the caching one", dc)
		}
		if _, ok := c.stmts[`insert into kv (k, v) values (?, ?)`]; !ok {
			t.Error("the insert is not cached")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
