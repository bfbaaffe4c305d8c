-- Since when a payout canceled in the bank-file queue counts as waiting
-- for its return to be posted, when that is not its cancel (updated_at).
-- Migration payout/0026 left every payout canceled in the queue before it
-- unrecorded (cancel_posted_at null) and marked its workflow to start
-- again, which posts and records the return within seconds of the
-- upgrade. Aged from its cancel, weeks ago,
-- gpubill_payout_cancel_unposted_age_seconds read weeks from the
-- upgrade's first scrape and GpubillPayoutCancelNotReturned paged before
-- the workflows had posted (the ledger restarting in the same upgrade
-- delays them). Null for a payout canceled since: the gauge ages it from
-- its cancel.
--
-- The backfill: the payouts 0026 marked whose workflow has not started
-- since (0026 and 0029 run together on an upgrade: all of them) age from
-- now. On a database that ran 0026 in an earlier release, the starter has
-- started theirs (workflow_started): one still unposted keeps its age,
-- and its page.

-- +goose Up
alter table payout.payouts add column cancel_unposted_since timestamptz;
update payout.payouts set cancel_unposted_since = now()
    where status = 'canceled' and rail_reference <> '' and cancel_posted_at is null and not workflow_started;

-- +goose Down
alter table payout.payouts drop column cancel_unposted_since;
