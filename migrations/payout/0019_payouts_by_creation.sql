-- A provider's payouts list newest created first, ties by id (descending),
-- no longer by id: a payout's id sorts by its cycle, so one settled late
-- for an old cycle listed below payouts created before it. This index is
-- that order: a page reads its rows from the position on and stops, where
-- payouts_provider (provider_id, created_at desc) made every page read and
-- sort all of a provider's payouts before the position. It replaces
-- payouts_provider, its prefix.

-- +goose Up
create index payouts_provider_created on payout.payouts (provider_id, created_at desc, payout_id desc);
drop index payout.payouts_provider;

-- +goose Down
create index payouts_provider on payout.payouts (provider_id, created_at desc);
drop index payout.payouts_provider_created;
