-- A payout settled outside whose ledger entry finance later reversed is no
-- longer paid: the periodic check moves it back to failed and its claims
-- (payout.settled_outside) move here, with the reversing transaction of
-- each one reversed ('' for a claim released with it, not reversed), so
-- the payout can be settled outside again and the claim's history stays.

-- +goose Up
create table payout.settled_outside_released (
    payout_id      text not null references payout.payouts (payout_id),
    transaction_id text not null,
    reason         text not null,
    settled_by     text not null,
    settled_at     timestamptz not null,
    reversed_by    text not null,
    released_at    timestamptz not null
);
create index settled_outside_released_payout on payout.settled_outside_released (payout_id);

-- +goose Down
drop table payout.settled_outside_released;
