-- The (method, seq) index on ledger.audit_events served no query: the
-- audit listing's method filter matches the full gRPC name or its last
-- element (method = $2 or method like '%/' || $2), and a btree cannot
-- answer the suffix match, so the planner scans by seq with the filter
-- even with the index in place (EXPLAIN ANALYZE of the listing's statement
-- over 300 000 records). Every audited request of every service paid its insert: with
-- a handful of methods, each new entry lands mid-index at the end of its
-- method's range. Inserting 100 000 records in order took 9.4-9.8 µs per
-- record without it against 12.2-12.8 with it (three batches each, a
-- cluster of its own). Listing by method stays a filter on the seq scan,
-- as it was.

-- +goose NO TRANSACTION
-- +goose Up
drop index concurrently if exists ledger.audit_events_method;

-- +goose Down
create index concurrently if not exists audit_events_method on ledger.audit_events (method, seq);
