package stmtcache

import (
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
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

// Temporal's read of a page of timer tasks runs bounded below (rewrite):
// the text matched is the Temporal server's own (read from the module this
// binary builds with, so an upgrade that changes it fails here), the
// statement run and cached is the bounded one, SQLite's plan for it has the
// lower bound on the key, and it answers as the original does.
func TestTimerTasksReadBounded(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "go.temporal.io/server").Output()
	if err != nil {
		t.Fatalf("go list go.temporal.io/server: %v", err)
	}
	src, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "common/persistence/sql/sqlplugin/sqlite/execution.go"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("getTimerTasksQuery = `([^`]*)`").FindSubmatch(src)
	if m == nil {
		t.Fatal("getTimerTasksQuery not found in the Temporal server's SQLite plugin")
	}
	temporalSQL := string(m[1])
	if got := strings.Join(strings.Fields(temporalSQL), " "); got != timerTasksSQL {
		t.Fatalf("Temporal's timer read is now\n%s\nnot\n%s", got, timerTasksSQL)
	}

	if err := Install(); err != nil {
		t.Fatal(err)
	}
	// Times bound as the Temporal server's SQLite plugin binds them:
	// time.Time values, written in SQLite's text format (_time_format).
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "t.db")+"?_time_format=sqlite")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(`CREATE TABLE timer_tasks (shard_id INT NOT NULL, visibility_timestamp TIMESTAMP NOT NULL,
		task_id BIGINT NOT NULL, data MEDIUMBLOB NOT NULL, data_encoding VARCHAR(16) NOT NULL,
		PRIMARY KEY (shard_id, visibility_timestamp, task_id))`); err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 12, 3, 6, 0, 0, 0, time.UTC)
	ts := func(s int) time.Time {
		return base.Add(time.Duration(s)*time.Second + time.Duration(s%7)*time.Microsecond)
	}
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for shard := 1; shard <= 2; shard++ {
		for i := range 3000 { // timestamps 0..2999 s, several tasks per second
			if _, err := tx.Exec(`insert into timer_tasks values (?, ?, ?, x'00', 'proto3')`, shard, ts(i%600*6), i); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	for _, q := range [][6]any{
		{1, ts(1200), 0, ts(1200), ts(1800), 100},
		{1, ts(1200), 1500, ts(1200), ts(1800), 7},
		{2, ts(0), 0, ts(0), ts(3600), 5000},
		{1, ts(3594), 2999, ts(3594), ts(3600), 10},
		{2, ts(600), 2000, ts(600), ts(606), 3},
	} {
		bounded := readTimers(t, db, temporalSQL, q)
		// The same text with a comment is not rewritten: the original plan.
		unbounded := readTimers(t, db, temporalSQL+" -- as sent", q)
		if fmt.Sprint(bounded) != fmt.Sprint(unbounded) {
			t.Fatalf("params %v: bounded read %v, original %v", q, bounded, unbounded)
		}
	}

	conn, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.Raw(func(dc any) error {
		c := dc.(*cachingConn)
		if _, ok := c.stmts[boundedTimerTasksSQL]; !ok {
			t.Error("Temporal's timer read did not run as the bounded statement")
		}
		if _, ok := c.stmts[temporalSQL]; ok {
			t.Error("Temporal's timer read ran as sent")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for sqlText, want := range map[string]string{
		boundedTimerTasksSQL:        "(shard_id=? AND visibility_timestamp>? AND visibility_timestamp<?)",
		temporalSQL + " -- as sent": "(shard_id=? AND visibility_timestamp<?)",
	} {
		var id, parent, notused int
		var detail string
		if err := conn.QueryRowContext(t.Context(), "EXPLAIN QUERY PLAN "+sqlText, 1, ts(0), 0, ts(0), ts(1), 1).Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(detail, want) {
			t.Errorf("plan of %.60q… is %q, want %s", sqlText, detail, want)
		}
	}
}

// readTimers runs a timer read with params (shard, min time, min task id,
// min time, max time, limit) and returns its rows' times and task ids.
func readTimers(t *testing.T, db *sql.DB, query string, p [6]any) []string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), query, p[:]...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var at any
		var id int64
		var data []byte
		var enc string
		if err := rows.Scan(&at, &id, &data, &enc); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%v/%d", at, id))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 {
		t.Fatalf("params %v: no rows (a test that compares nothing)", p)
	}
	return got
}
