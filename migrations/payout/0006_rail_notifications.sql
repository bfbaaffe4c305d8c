-- +goose Up
-- Payment rails' asynchronous notifications (issue 17: WeChat Pay, Alipay).
-- rail_notifications keeps the replay key of every notification applied
-- (WeChat Pay: its Wechatpay-Nonce; Alipay: its notify_id): the same key
-- again is a replay and is refused. rail_topups keeps each renter payment a
-- rail confirmed, once per payment id, with the ledger deposit it became
-- (external_ref = rail:payment_id) and how often it was notified.
create table payout.rail_notifications (
    rail text not null,
    notification_key text not null,
    kind text not null check (kind in ('topup', 'payout')),
    reference text not null,
    received_at timestamptz not null,
    primary key (rail, notification_key));

create table payout.rail_topups (
    rail text not null,
    payment_id text not null,
    renter_id text not null,
    currency text not null,
    amount numeric not null,
    ledger_transaction_id text not null,
    notifications int not null default 1,
    first_at timestamptz not null,
    last_at timestamptz not null,
    primary key (rail, payment_id));

-- +goose Down
drop table payout.rail_topups;
drop table payout.rail_notifications;
