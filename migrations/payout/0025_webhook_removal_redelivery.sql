-- A webhook can be removed (deleted_at): nothing more is queued for it,
-- its pending deliveries are canceled, and it leaves the provider's cap
-- (the row stays: its delivery log refers to it). A delivery given up can
-- be sent again on request (redelivered_at: its retry window counts from
-- then, not from its change).

-- +goose Up
alter table payout.webhooks add column deleted_at timestamptz;
alter table payout.webhook_deliveries add column redelivered_at timestamptz;
alter table payout.webhook_deliveries drop constraint webhook_deliveries_status_check;
alter table payout.webhook_deliveries add constraint webhook_deliveries_status_check
    check (status in ('pending', 'delivered', 'failed', 'canceled'));

-- +goose Down
update payout.webhook_deliveries set status = 'failed' where status = 'canceled';
alter table payout.webhook_deliveries drop constraint webhook_deliveries_status_check;
alter table payout.webhook_deliveries add constraint webhook_deliveries_status_check
    check (status in ('pending', 'delivered', 'failed'));
alter table payout.webhook_deliveries drop column redelivered_at;
alter table payout.webhooks drop column deleted_at;
