-- The GIN index on transactions.metadata served no query (nothing filters
-- journal rows by metadata) and was ~35% of the cost of inserting a fetched
-- batch of charge transactions (2 560 rows against 20k: ~95 -> ~58 ms).
-- A query by a metadata key should come with its own narrow expression index
-- (e.g. ((metadata->>'lease_id'))), not a GIN over every key of every row.
-- Dropped concurrently, so writers keep posting.

-- +goose NO TRANSACTION
-- +goose Up
drop index concurrently if exists ledger.transactions_metadata_idx;
