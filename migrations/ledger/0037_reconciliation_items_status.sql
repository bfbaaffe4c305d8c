-- A run's answer (GET /v1/reconciliations/{id}, a keyed replay) carries the
-- first of each of its lists: its matched and unmatched items, its
-- statement breaks, its cash differences; the routes of each page the rest.
-- Each list is read by status in item order: without this index a read of
-- a run's first statement breaks walked every item of the run by
-- (reconciliation_id, item_no) to reach them, tens of thousands for a
-- year's statement. Built concurrently, so runs keep being stored while a
-- large table is indexed; an index a failed build left invalid is dropped
-- first (if not exists would keep it).

-- +goose NO TRANSACTION
-- +goose Up
drop index concurrently if exists ledger.reconciliation_items_status_idx;
create index concurrently reconciliation_items_status_idx on ledger.reconciliation_items (reconciliation_id, status, item_no);

-- +goose Down
drop index concurrently if exists ledger.reconciliation_items_status_idx;
