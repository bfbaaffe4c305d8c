-- +goose Up
-- content_digest: a digest of a notification's content (Alipay: the signed
-- fields but sign, sign_type and notify_time), so the rail's own resend of
-- a notification applied before (the same notify_id, the same content) is
-- told apart from a replay carrying other content. Null for the rails and
-- the notifications that keep none (WeChat Pay signs each retry anew).
alter table payout.rail_notifications add column content_digest text;

-- Refunds a rail notified of a top-up it confirmed (Alipay: refund_fee,
-- the trade's refunded total so far, on TRADE_SUCCESS for a partial refund
-- and TRADE_CLOSED for a full one), once per refunded total. gpubill makes
-- no refunds: they are made in the rail's merchant console, and each one
-- recorded here pages finance to take the money back from the wallet.
create table payout.rail_refunds (
    rail text not null,
    payment_id text not null,
    refunded_total numeric not null check (refunded_total > 0),
    renter_id text not null,
    currency text not null,
    refunded_at text not null,
    notification_key text not null,
    received_at timestamptz not null,
    primary key (rail, payment_id, refunded_total));

-- +goose Down
drop table payout.rail_refunds;
alter table payout.rail_notifications drop column content_digest;
