-- Renters' top-up orders as opened: the order number is derived from the
-- renter and the idempotency key, and the key's first order is kept, so the
-- same key sent again with another rail or amount is a conflict (it opened a
-- second payable order on the other rail, or the same number for another
-- amount).

-- +goose Up
create table payout.topup_orders (
    order_id   text primary key,
    renter_id  text not null,
    rail       text not null,
    currency   text not null,
    amount     numeric not null,
    created_at timestamptz not null);

-- +goose Down
drop table payout.topup_orders;
