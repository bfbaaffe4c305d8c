-- Lease overlap without GiST: the btree_gist exclusion constraint cost ~10x
-- the insert time of a 5 000-event batch. Overlap is now checked by the
-- insert itself against a btree on (lease_id, start_time) (an event lasts at
-- most 24 h, so the probe is a short range scan), with ingest transactions
-- serialised by an advisory lock so two batches cannot both pass the check.

-- +goose Up
alter table metering.usage_events drop constraint usage_lease_no_overlap;
create index usage_events_lease on metering.usage_events (lease_id, start_time);
