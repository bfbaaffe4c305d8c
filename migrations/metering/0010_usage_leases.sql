-- Usage listing by renter or provider goes through the party's leases
-- instead of an index entry per event. usage_leases holds one row per lease
-- and party pair (a lease whose events name two renters has two rows): the
-- lease's first start and the UTC day of its last end. Ingest writes a row
-- when a lease is first seen and touches it again only when an event starts
-- earlier or ends on a later day, where the two party indexes of
-- usage_events took two btree inserts per event: the pipeline bench's
-- Postgres CPU per event went from 10.9-11.8 to 8.8-8.9 µs (interleaved).
-- An upsert that widens nothing still locks its row: ~3 µs per lease and
-- party pair of a batch, against ~4 µs for the two index entries of an
-- event.
--
-- A page of a party's usage then probes usage_events_lease once per lease of
-- the party that has ended on or after the page's lower bound day (the
-- cursor's start, else the window's from): its cost follows the party's
-- leases active since then, not its whole history.
--
-- The backfill reads usage_events once (a hash aggregate) under a SHARE
-- lock, so no event is recorded between it and the switch: ingest waits,
-- minutes for tens of millions of rows. Stop metering replicas of an
-- earlier version before this runs: one still ingesting afterwards records
-- events without their usage_leases rows, and party listings miss them.

-- +goose Up
lock table metering.usage_events in share mode;

create table metering.usage_leases (
    lease_id    text collate "C" not null,
    renter_id   text collate "C" not null,
    provider_id text collate "C" not null,
    first_start timestamptz not null,
    last_day    date not null, -- UTC day of the latest end_time
    primary key (lease_id, renter_id, provider_id));

insert into metering.usage_leases (lease_id, renter_id, provider_id, first_start, last_day)
select lease_id, renter_id, provider_id, min(start_time), max((end_time at time zone 'UTC')::date)
from metering.usage_events
group by lease_id, renter_id, provider_id;

create index usage_leases_renter on metering.usage_leases (renter_id, last_day);
create index usage_leases_provider on metering.usage_leases (provider_id, last_day);

drop index metering.usage_events_renter_time;
drop index metering.usage_events_provider_time;

-- +goose Down
create index usage_events_renter_time on metering.usage_events (renter_id, start_time);
create index usage_events_provider_time on metering.usage_events (provider_id, start_time);
drop table metering.usage_leases;
