-- Every write moves its balances (ledger.balances) and, for charges, the
-- minute of each wallet's burn (ledger.wallet_burn) by an upsert: a fetched
-- batch of charges updates a row per renter and provider it touches. On
-- full pages (fillfactor 100) most new row versions went to another page,
-- so most updates also inserted an entry into the primary key (the WAL of
-- one ledger_postings pass held 10 890 balances_pkey and 9 313
-- wallet_burn_pkey inserts for ~12 000 and ~10 000 upserts, 1 200 and
-- 1 000 of them new rows; with this, 2 584 and 2 573). With room left on
-- each page the update stays on it (a heap-only tuple): no index entry,
-- and pruning reclaims the dead versions in place. Pages filled before
-- this migration keep no room until their rows move.

-- +goose Up
alter table ledger.balances set (fillfactor = 70);
alter table ledger.wallet_burn set (fillfactor = 70);

-- +goose Down
alter table ledger.balances reset (fillfactor);
alter table ledger.wallet_burn reset (fillfactor);
