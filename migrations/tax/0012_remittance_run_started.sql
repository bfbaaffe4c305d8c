-- When a remittance run took the runs' lock (started_at), beside when its
-- record was written (completed_at, its last write). A run stamped every
-- record with the one instant it read on taking the lock, so completed_at
-- said when it started: an auditor read a completion before the run's
-- remittances were planned and posted. Null for the runs recorded before
-- this migration, and for those an earlier replica records during a rolling
-- upgrade (it names no started_at; it still stamps completed_at with its
-- start).

-- +goose Up
alter table tax.remittance_runs add column started_at timestamptz,
    add constraint remittance_runs_started_before_completed check (started_at is null or started_at <= completed_at);

-- +goose Down
alter table tax.remittance_runs drop column started_at;
