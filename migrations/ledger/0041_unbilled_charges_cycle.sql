-- A provider whose only charges in a cycle were billed at 0.00 has no
-- balance in it (nothing was posted), so the cycle's balances, which
-- settlement pages through at the close to know whom to settle, left it
-- out: its GPU-hours were on no statement. The cycle's listing
-- (ListCycleBalances) reads those pending accounts here, by cycle: the
-- cycle is the last part of the account the charge went to (after any
-- redirect from a closed cycle). Generated, so a replica of the version
-- before this one, which does not write it, records it all the same.

-- +goose Up
alter table ledger.unbilled_charges
    add column cycle_id text generated always as (substring(account from ':pending:([^:]+)$')) stored;
create index unbilled_charges_cycle on ledger.unbilled_charges (cycle_id, account collate "C", currency);

-- +goose Down
drop index ledger.unbilled_charges_cycle;
alter table ledger.unbilled_charges drop column cycle_id;
