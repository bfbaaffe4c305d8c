-- A resolution by hand could not be undone: finance writing off the wrong
-- items had no way back (each line and movement resolved once, by unique
-- index, for good). A void, with a reason, keeps the resolution as it was
-- and opens its items again: the currency's next run after the void takes
-- them over. reconciliation_id is the currency's latest run when voided
-- (taken under its run lock): that run's successor reopens the items and
-- lists the resolution. Kept as they were, like the runs.
--
-- A line or movement may now be named by several resolutions (a voided one
-- and the one after); at most one of them not voided, which the resolving
-- write checks under the currency's run lock. The unique indexes become
-- plain ones for those lookups.

-- +goose Up
create table ledger.reconciliation_resolution_voids (
    resolution_id     text primary key references ledger.reconciliation_resolutions,
    reconciliation_id text not null references ledger.reconciliations (reconciliation_id),
    reason            text not null check (btrim(reason) <> '' and octet_length(reason) <= 500),
    voided_by         text not null,
    voided_at         timestamptz not null
);
create index reconciliation_resolution_voids_run_idx on ledger.reconciliation_resolution_voids (reconciliation_id);

create trigger reconciliation_resolution_voids_immutable before update or delete on ledger.reconciliation_resolution_voids
    for each row execute function ledger.refuse_reconciliation_change();

drop index ledger.reconciliation_resolution_items_line_idx;
create index reconciliation_resolution_items_line_idx on ledger.reconciliation_resolution_items (statement_id, line_no)
    where statement_id is not null;
drop index ledger.reconciliation_resolution_items_movement_idx;
create index reconciliation_resolution_items_movement_idx on ledger.reconciliation_resolution_items (transaction_id)
    where transaction_id is not null;

-- +goose Down
drop index ledger.reconciliation_resolution_items_movement_idx;
create unique index reconciliation_resolution_items_movement_idx on ledger.reconciliation_resolution_items (transaction_id)
    where transaction_id is not null;
drop index ledger.reconciliation_resolution_items_line_idx;
create unique index reconciliation_resolution_items_line_idx on ledger.reconciliation_resolution_items (statement_id, line_no)
    where statement_id is not null;
drop table ledger.reconciliation_resolution_voids;
