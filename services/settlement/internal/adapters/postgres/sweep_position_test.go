package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/gpubill/gpubill/services/settlement/internal/domain"
)

// The commission sweep's position: each take answers a later run and the
// position the last holder left; only the run that took it last moves it
// (an earlier run's move is refused and changes nothing); nil clears it;
// a missing row is made again.
func TestSweepPositionIsMovedByTheLastRunToTakeIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	at := domain.Unswept{CycleID: "cyc-20261101", ProviderID: "p-1", Currency: "CNY",
		SettledAt: time.Date(2026, 12, 1, 10, 0, 0, 123456000, time.UTC)}
	take := func() (int64, *domain.Unswept) {
		t.Helper()
		run, pos, err := s.TakeSweepPosition(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return run, pos
	}
	move := func(run int64, pos *domain.Unswept) bool {
		t.Helper()
		ok, err := s.MoveSweepPosition(ctx, run, pos)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	r1, pos := take()
	if pos != nil {
		t.Fatalf("first take: position %+v, want none", *pos)
	}
	if !move(r1, &at) {
		t.Fatalf("run %d, the holder, refused", r1)
	}
	r2, pos := take()
	if r2 <= r1 || pos == nil || pos.CycleID != at.CycleID || pos.ProviderID != at.ProviderID || pos.Currency != at.Currency || !pos.SettledAt.Equal(at.SettledAt) {
		t.Fatalf("second take: run %d (after %d), position %+v; want a later run at %+v", r2, r1, pos, at)
	}
	later := at
	later.ProviderID = "p-2"
	if !move(r2, &later) {
		t.Fatalf("run %d, the holder, refused", r2)
	}
	if move(r1, &at) {
		t.Errorf("run %d, superseded by %d, moved the position", r1, r2)
	}
	r3, pos := take()
	if pos == nil || pos.ProviderID != "p-2" {
		t.Fatalf("after the superseded move: position %+v, want p-2's", pos)
	}
	if !move(r3, nil) {
		t.Fatalf("run %d, the holder, refused", r3)
	}
	if _, pos := take(); pos != nil {
		t.Errorf("after a move to none: position %+v, want none", *pos)
	}
	if _, err := s.Pool.Exec(ctx, `delete from settlement.commission_sweep_position`); err != nil {
		t.Fatal(err)
	}
	if r, pos := take(); pos != nil || !move(r, &at) {
		t.Errorf("with the row gone: run %d, position %v; want the row made again, no position, movable", r, pos)
	}
}
