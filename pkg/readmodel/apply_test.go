package readmodel

import (
	"context"
	"errors"
	"reflect"
	"testing"
)

// fakeStore is an inbox and a table in memory; a transaction's writes are
// kept only when fn returns nil.
type fakeStore struct {
	seen    map[string]bool
	rows    []string
	upserts int
	failUp  error
}

func (s *fakeStore) WithTx(ctx context.Context, fn func(Tx[string]) error) error {
	tx := &fakeTx{s: s, seen: map[string]bool{}}
	if err := fn(tx); err != nil {
		return err
	}
	for id := range tx.seen {
		s.seen[id] = true
	}
	s.rows = append(s.rows, tx.rows...)
	s.upserts += tx.upserts
	return nil
}

type fakeTx struct {
	s       *fakeStore
	seen    map[string]bool
	rows    []string
	upserts int
}

func (t *fakeTx) Claim(_ context.Context, consumer string, ids []string) (map[string]bool, error) {
	if consumer != "c1" {
		return nil, errors.New("claimed for " + consumer)
	}
	fresh := map[string]bool{}
	for _, id := range ids {
		if !t.s.seen[id] && !t.seen[id] {
			fresh[id] = true
			t.seen[id] = true
		}
	}
	return fresh, nil
}

func (t *fakeTx) Upsert(_ context.Context, rows []string) error {
	if t.s.failUp != nil {
		return t.s.failUp
	}
	t.upserts++
	t.rows = append(t.rows, rows...)
	return nil
}

func TestApplierAppliesEachIDOnce(t *testing.T) {
	ctx := context.Background()
	s := &fakeStore{seen: map[string]bool{}}
	a := &Applier[string]{Store: s, Consumer: "c1"}
	batch := []Update[string]{{ID: "a", Row: "a1", Keep: true}, {ID: "b", Keep: false}, {ID: "a", Row: "a2", Keep: true}}
	if err := a.Apply(ctx, batch); err != nil {
		t.Fatal(err)
	}
	// Redelivered: every id claimed before, nothing upserted again.
	if err := a.Apply(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if want := []string{"a1"}; !reflect.DeepEqual(s.rows, want) || s.upserts != 1 {
		t.Fatalf("rows %v after %d upserts, want %v after 1", s.rows, s.upserts, want)
	}
	if !s.seen["a"] || !s.seen["b"] {
		t.Fatalf("claimed %v, want a and b", s.seen)
	}
}

func TestApplierFailedUpsertClaimsNothing(t *testing.T) {
	s := &fakeStore{seen: map[string]bool{}, failUp: errors.New("disk full")}
	a := &Applier[string]{Store: s, Consumer: "c1"}
	err := a.Apply(context.Background(), []Update[string]{{ID: "a", Row: "a1", Keep: true}})
	if err == nil || !errors.Is(err, s.failUp) {
		t.Fatalf("Apply = %v, want the upsert's error", err)
	}
	if len(s.seen) != 0 || len(s.rows) != 0 {
		t.Fatalf("a failed batch left claims %v and rows %v", s.seen, s.rows)
	}
}
