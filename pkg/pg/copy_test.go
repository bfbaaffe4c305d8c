package pg_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/testkit"
)

// TestCopyWriterRoundTrips: every field type CopyWriter writes reads back
// from PostgreSQL as what was written. Numerics are compared as the server
// prints them (their scale included, 1.50 stays 1.50): zero at any scale,
// negative, under one, whole numbers with trailing zeros, exponents above
// zero, and random values of up to 40 digits at scales 0..20.
func TestCopyWriterRoundTrips(t *testing.T) {
	pool, _ := testkit.NewPool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `create table copy_rt (i int4 not null, n numeric not null, s text not null,
		a text[] not null, j jsonb not null, ts timestamptz not null, k int4 not null, u uuid not null, b bytea not null, d date not null)`); err != nil {
		t.Fatal(err)
	}
	nums := []string{"0", "0.00", "-0.0", "1", "-1", "0.5", "-0.0001", "1.50", "10000", "9999.9999", "12345678.87654321",
		"100000000", "0.00000001", "123e3", "-5e-12", "1e20", "2.83", "70.75000000"}
	rng := rand.New(rand.NewPCG(7, 11))
	for i := 0; i < 400; i++ {
		var b strings.Builder
		if rng.IntN(2) == 0 {
			b.WriteByte('-')
		}
		for d := 0; d < 1+rng.IntN(40); d++ {
			b.WriteByte(byte('0' + rng.IntN(10)))
		}
		nums = append(nums, fmt.Sprintf("%se-%d", b.String(), rng.IntN(21)))
	}
	texts := []string{"", "a", "租户-é", "with 'quote' and \\ backslash", strings.Repeat("x", 300)}
	arrays := [][]string{nil, {}, {"a"}, {"bev-1", "", "租户"}, texts}
	js := []string{`[]`, `{"a":1}`, `[{"kind":"usage","amount":"1.50"}]`, `"租户"`}
	times := []time.Time{time.Date(2026, 11, 20, 9, 0, 0, 123456000, time.UTC), time.Date(1999, 12, 31, 23, 59, 59, 0, time.UTC), time.Unix(0, 0).UTC(),
		time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(1999, 12, 31, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 4, 23, 59, 59, 999999000, time.UTC)}

	w := pg.NewCopyWriter(0)
	want := make([]string, len(nums))
	for i, n := range nums {
		d := decimal.RequireFromString(n)
		scale := 0
		if d.Exponent() < 0 {
			scale = int(-d.Exponent())
		}
		want[i] = d.StringFixed(int32(scale))
		if d.IsZero() {
			want[i] = decimal.Zero.StringFixed(int32(scale))
		}
		w.Row(10)
		w.Int4(int32(i))
		if i%3 == 2 { // every third trimmed, as its String: no trailing fractional zeros
			want[i] = d.String()
			w.NumericTrimmed(d)
		} else {
			w.Numeric(d)
		}
		w.Text(texts[i%len(texts)])
		w.TextArray(arrays[i%len(arrays)])
		w.JSONB([]byte(js[i%len(js)]))
		w.Timestamptz(times[i%len(times)])
		w.Int4(int32(-i))
		w.UUID([16]byte{0: byte(i), 15: byte(i >> 8), 7: 0x70})
		w.Bytea(bytes.Repeat([]byte{byte(i), 0}, i%5))
		w.Date(times[i%len(times)])
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	tag, err := conn.Conn().PgConn().CopyFrom(ctx, bytes.NewReader(w.Done()), `copy copy_rt from stdin (format binary)`)
	if err != nil {
		t.Fatal(err)
	}
	if tag.RowsAffected() != int64(len(nums)) {
		t.Fatalf("copied %d rows, want %d", tag.RowsAffected(), len(nums))
	}
	rows, err := pool.Query(ctx, `select i, n::text, s, a, coalesce(array_lower(a, 1), 1), j::text, ts, k, u::text, b, d::text from copy_rt order by i`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := 0
	for rows.Next() {
		var i, k, lower int32
		var n, s, j string
		var a []string
		var ts time.Time
		var u string
		var b []byte
		var d string
		if err := rows.Scan(&i, &n, &s, &a, &lower, &j, &ts, &k, &u, &b, &d); err != nil {
			t.Fatal(err)
		}
		if n != want[i] {
			t.Errorf("row %d: numeric %s reads back as %s, want %s", i, nums[i], n, want[i])
		}
		wantJS := strings.ReplaceAll(js[int(i)%len(js)], ":", ": ")
		wantJS = strings.ReplaceAll(wantJS, ",", ", ")
		if s != texts[int(i)%len(texts)] || strings.Join(a, "|") != strings.Join(arrays[int(i)%len(arrays)], "|") || len(a) != len(arrays[int(i)%len(arrays)]) || lower != 1 ||
			j != wantJS || !ts.Equal(times[int(i)%len(times)]) || k != -i ||
			u != fmt.Sprintf("%02x000000-0000-0070-0000-0000000000%02x", byte(i), byte(i>>8)) || !bytes.Equal(b, bytes.Repeat([]byte{byte(i), 0}, int(i)%5)) ||
			d != times[int(i)%len(times)].Format(time.DateOnly) {
			t.Errorf("row %d: read back %q %q %s %s %d %s %x %s", i, s, a, j, ts, k, u, b, d)
		}
		got++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if got != len(nums) {
		t.Fatalf("read %d rows, want %d", got, len(nums))
	}
}

// CopyUnlessRepeated: a fresh batch goes in; a batch repeating a key goes
// in not at all, and the transaction carries on; any other error is one.
func TestCopyUnlessRepeated(t *testing.T) {
	pool, _ := testkit.NewPool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `create table cur (k text primary key, v int4 not null)`); err != nil {
		t.Fatal(err)
	}
	stream := func(keys ...string) []byte {
		w := pg.NewCopyWriter(0)
		for i, k := range keys {
			w.Row(2)
			w.Text(k)
			w.Int4(int32(i))
		}
		return w.Done()
	}
	const sql = `copy cur (k, v) from stdin (format binary)`
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if copied, err := pg.CopyUnlessRepeated(ctx, tx, stream("a", "b"), sql); !copied || err != nil {
		t.Fatalf("fresh batch: copied %v, %v", copied, err)
	}
	if copied, err := pg.CopyUnlessRepeated(ctx, tx, stream("c", "b", "d"), sql); copied || err != nil {
		t.Fatalf("batch repeating b: copied %v, %v; want false and no error", copied, err)
	}
	bad := []byte("not a copy stream")
	if _, err := pg.CopyUnlessRepeated(ctx, tx, bad, sql); err == nil || pg.IsUniqueViolation(err) {
		t.Fatalf("malformed stream: %v, want its error", err)
	}
	if _, err := tx.Exec(ctx, `select 1`); err == nil {
		t.Fatal("the transaction went on after an error that was not a repeat")
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	tx, err = pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pg.CopyUnlessRepeated(ctx, tx, stream("a", "b"), sql); err != nil {
		t.Fatal(err)
	}
	if copied, err := pg.CopyUnlessRepeated(ctx, tx, stream("c", "b"), sql); copied || err != nil {
		t.Fatalf("batch repeating b: copied %v, %v", copied, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit after a repeated batch: %v", err)
	}
	var keys string
	if err := pool.QueryRow(ctx, `select string_agg(k, ',' order by k) from cur`).Scan(&keys); err != nil || keys != "a,b" {
		t.Fatalf("rows %q (%v), want a,b: the repeated batch left nothing", keys, err)
	}
}
