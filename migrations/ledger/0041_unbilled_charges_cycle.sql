-- A provider whose only charges in a cycle were billed at 0.00 has no
-- balance in it (nothing was posted), so the cycle's balances, which
-- settlement pages through at the close to know whom to settle, left it
-- out: its GPU-hours were on no statement. The cycle's listing
-- (ListCycleBalances) reads those pending accounts here, by cycle: the
-- cycle is the last part of the account the charge went to (after any
-- redirect from a closed cycle), this index's expression, which the
-- listing names as written here.
--
-- An expression index, built concurrently: a stored generated column
-- rewrote the whole table under an exclusive lock (~7 s a million rows,
-- every 0.00 charge's insert waiting), and a small event's charge is often
-- 0.00. An index a failed build left invalid is dropped first. Replicas of
-- the version before this one neither read nor mind it.

-- +goose NO TRANSACTION
-- +goose Up
drop index concurrently if exists ledger.unbilled_charges_cycle;
create index concurrently unbilled_charges_cycle on ledger.unbilled_charges
    ((substring(account from ':pending:([^:]+)$')), (account collate "C"), currency);

-- +goose Down
drop index concurrently if exists ledger.unbilled_charges_cycle;
