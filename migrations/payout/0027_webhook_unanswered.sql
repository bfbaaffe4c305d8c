-- Whether a webhook's receiver answered its last attempt. One that did not
-- (a timeout, a refused connection) rests in the sending process, its
-- deliveries staying due: held in memory only, the sender's lag
-- (gpubill_payout_webhook_delivery_lag_seconds) read them as the sender's
-- backlog, and one receiver down with a deep queue fired
-- GpubillPayoutWebhooksBehind while every other provider's notices flowed.
-- unanswered_since: the first attempt of the current run without an
-- answer; unanswered_at: the last one. Both null once an attempt is
-- answered (any status code), and for a webhook never sent to.

-- +goose Up
alter table payout.webhooks add column unanswered_since timestamptz;
alter table payout.webhooks add column unanswered_at timestamptz;

-- +goose Down
alter table payout.webhooks drop column unanswered_at;
alter table payout.webhooks drop column unanswered_since;
