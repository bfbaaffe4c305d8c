-- Where the hourly commission sweep resumes: the last unswept statement a
-- run tried, by the keyset it pages on (settled_at, cycle_id, provider_id,
-- currency), or none (from the oldest). Kept in each replica's memory, it
-- was lost at every restart (a backlog longer than one run's time never had
-- its tail tried while restarts came more often than its runs), and each
-- replica kept its own.
--
-- One row. run is the number of the run that holds the position: each run
-- takes it at its start (run + 1) and moves the position only while it
-- still holds it, so of two runs at once the later one moves it and the
-- earlier one stops (a position never written back by a run another has
-- overtaken). The sweeps themselves are posted once whatever runs try them
-- (the ledger's sweep key); this row only orders the work.

-- +goose Up
create table settlement.commission_sweep_position (
    id boolean primary key default true check (id),
    run bigint not null default 0,
    settled_at timestamptz,
    cycle_id text,
    provider_id text,
    currency text,
    updated_at timestamptz not null default now(),
    check ((settled_at is null and cycle_id is null and provider_id is null and currency is null)
        or (settled_at is not null and cycle_id is not null and provider_id is not null and currency is not null)));
insert into settlement.commission_sweep_position default values;

-- +goose Down
drop table settlement.commission_sweep_position;
