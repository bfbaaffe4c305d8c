-- GET /v1/audit-events?resource=transaction_id=… (who touched a
-- transaction or a payout) answers the records holding that resource id
-- entry: resource_ids @> array[$resource], which a GIN over the array
-- answers with the few records of one transaction; without it the
-- listing walked the whole log by seq. It costs the audit writer: on
-- 300 000 synthetic records of five ids each (a uuid and a key unique per
-- record), an insert took ~11-14 µs per record with it against ~4.6
-- without (three batches of 100 000 each, on a shared machine), the
-- index as large as the table. fastupdate (the default) is kept: with it
-- off each insert took ~15-17 µs. Built concurrently, so the writer
-- keeps appending while a large log is indexed; an index a failed build
-- left invalid is dropped first (if not exists would keep it).

-- +goose NO TRANSACTION
-- +goose Up
drop index concurrently if exists ledger.audit_events_resource_ids;
create index concurrently audit_events_resource_ids on ledger.audit_events using gin (resource_ids);

-- +goose Down
drop index concurrently if exists ledger.audit_events_resource_ids;
