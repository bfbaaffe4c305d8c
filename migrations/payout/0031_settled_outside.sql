-- A failed or returned payout finance paid by hand, outside any rail: the
-- ledger transaction it posted (provider:{id}:available to bank:client, the
-- net) and why. A transaction pays one payout (unique): two payouts closed
-- on one entry would leave one of them unpaid and read paid.

-- +goose Up
create table payout.settled_outside (
    payout_id      text primary key references payout.payouts (payout_id),
    transaction_id text not null unique,
    reason         text not null,
    settled_by     text not null,
    settled_at     timestamptz not null
);

-- +goose Down
drop table payout.settled_outside;
