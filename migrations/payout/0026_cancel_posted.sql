-- When the ledger took the return of a payout canceled in the bank-file
-- queue (its amount from provider:{id}:in_transit back to available, key
-- payout-{id}-{attempt}-canceled). The cancel is saved first and posted
-- after (the transfer must leave the queue before the money comes back):
-- the ledger down, or the process gone in between, the payout read
-- canceled while its amount stayed in in_transit, and nothing in the
-- payout schema said whether the return was posted. A restore from such a
-- point restarted no workflow for it, and no gauge counted it. Null until
-- posted: gpubill_payout_cancel_unposted_age_seconds counts those, and a
-- restore or a recovery restarts their workflow, which posts it again.
--
-- The backfill: a payout canceled in the queue before this migration may
-- or may not have had its return posted (a workflow restarted by a restore
-- ended without posting it). Its workflow is started again: it posts the
-- return under the same key (one posted already is answered by the
-- ledger, not posted twice) and records it.

-- +goose Up
alter table payout.payouts add column cancel_posted_at timestamptz;
create index payouts_cancel_unposted on payout.payouts (updated_at)
    where status = 'canceled' and rail_reference <> '' and cancel_posted_at is null;
update payout.payouts set workflow_started = false where status = 'canceled' and rail_reference <> '';

-- +goose Down
drop index payout.payouts_cancel_unposted;
alter table payout.payouts drop column cancel_posted_at;
