-- A posting's created_at is its writer's clock when the write was asked
-- for, and the write may commit minutes later (a group commit has no
-- deadline, a charge batch runs for minutes): after a balance checkpoint at
-- or after its created_at was made from the postings committed then. The
-- checkpoint step re-counted the interval just before the new checkpoint
-- only, so a posting late into an older one was left out of every as-of
-- report from then on, and verify named the checkpoint altered.
--
-- The horizon is the latest instant a checkpoint covers or is being made
-- for: the checkpointer raises it before it waits for the writers then open
-- and sums the postings. A statement that inserts postings created at or
-- before it (or the latest checkpoint, which a replica of the version before
-- this one made without raising it) records the earliest such created_at
-- here, in the writer's own transaction: every snapshot that sees the late
-- postings sees the mark. Reports and verify leave out the checkpoints at or
-- after the earliest mark (they start from an earlier one, or the balances
-- now), and the checkpoint step rebuilds them and deletes the marks.
-- The writers are READ COMMITTED: the trigger reads the horizon after the
-- statement's insert has given the writer its transaction id, so a writer
-- either sees the raised horizon or was open when the checkpointer looked.

-- +goose Up
create table ledger.checkpoint_horizon (
    one bool primary key default true check (one),
    at  timestamptz not null
);
insert into ledger.checkpoint_horizon (at) select coalesce(max(at), '-infinity') from ledger.balance_checkpoints;

create table ledger.checkpoint_late (
    id        bigint generated always as identity primary key,
    since     timestamptz not null,
    marked_at timestamptz not null default now()
);

-- +goose StatementBegin
create function ledger.mark_late_postings() returns trigger language plpgsql as $$
begin
    insert into ledger.checkpoint_late (since)
    select n.since from (select min(created_at) as since from new_postings) n
    where n.since <= greatest((select at from ledger.checkpoint_horizon), (select max(at) from ledger.balance_checkpoints));
    return null;
end;
$$;
-- +goose StatementEnd

create trigger postings_late_for_checkpoint after insert on ledger.postings
    referencing new table as new_postings for each statement execute function ledger.mark_late_postings();

-- +goose Down
drop trigger postings_late_for_checkpoint on ledger.postings;
drop function ledger.mark_late_postings();
drop table ledger.checkpoint_late;
drop table ledger.checkpoint_horizon;
