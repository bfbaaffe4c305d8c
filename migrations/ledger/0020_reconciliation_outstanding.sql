-- A bank reconciliation tells a timing difference from an exception: a
-- ledger movement no statement line names yet, recorded less than 4 days
-- before the latest statement's close or after it, is outstanding, and a
-- run whose only unmatched items are outstanding is reconciled. Before,
-- every transfer of the last day kept the daily run at "exceptions" and
-- its alert on for good. Items keep when their movement was recorded, so a
-- later run judges a carried item the same way; items kept before this
-- have none and stay exceptions when unmatched. Adding columns rewrites no
-- row (the immutability triggers fire on none).

-- +goose Up
alter table ledger.reconciliations add column outstanding_ledger_count int not null default 0;
alter table ledger.reconciliation_items add column recorded_at timestamptz;
alter table ledger.reconciliation_items add column outstanding boolean not null default false;

-- +goose Down
alter table ledger.reconciliation_items drop column outstanding;
alter table ledger.reconciliation_items drop column recorded_at;
alter table ledger.reconciliations drop column outstanding_ledger_count;
