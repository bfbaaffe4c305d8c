-- A payout's webhook deliveries go out in the order of its status changes:
-- a claim takes a delivery only when no earlier one of its webhook and
-- payout is pending. Before, each was retried on its own backoff, so a
-- "returned" could reach the provider before the "paid" being retried, and
-- two replicas could send one payout's changes at once. This index finds
-- the earlier pending one.

-- +goose Up
create index webhook_deliveries_pending_payout on payout.webhook_deliveries (webhook_id, payout_id, delivery_id) where status = 'pending';

-- +goose Down
drop index payout.webhook_deliveries_pending_payout;
