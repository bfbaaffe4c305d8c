-- Usage listing by renter or provider: (party, start_time) is enough; the
-- id tie-break of the page order is an incremental sort of the rows sharing
-- a start_time. Dropping id from both keys cuts ~17% off the ingest insert
-- (a 5 000-event batch against 200k rows: 63 -> 52 ms, min of 8). Built
-- concurrently, so ingest keeps writing while a large table is indexed.

-- +goose NO TRANSACTION
-- +goose Up
create index concurrently if not exists usage_events_renter_time on metering.usage_events (renter_id, start_time);
create index concurrently if not exists usage_events_provider_time on metering.usage_events (provider_id, start_time);
drop index concurrently if exists metering.usage_events_renter;
drop index concurrently if exists metering.usage_events_provider;
