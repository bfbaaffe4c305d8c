-- A wallet's burn rate (lease control, GET /v1/renters/{id}/wallet) is the
-- usage charged to it over the last hour. It was read by summing every
-- charge posting of the wallet in that hour, each joined to its journal
-- row for the kind: a renter charged a thousand times a minute had 60 000
-- postings re-summed each time lease control looked at its wallet (every
-- ledger.posted batch that moved it), so the cost of a look grew with the
-- renter's rate of charging.
--
-- wallet_burn holds, per (account, currency, minute), the debits of charge
-- transactions created in that minute (minute: created_at truncated to
-- the UTC minute). The ledger adds to it in the transaction that writes the
-- postings. A burn read sums the whole minutes after the one its window
-- starts in (at most 61 rows) and takes the postings of that first, partial
-- minute one by one: the same sum as before, over at most a minute of
-- postings. The ledger deletes rows older than two hours every ten minutes.
--
-- The backfill covers the last two hours of charges. Stop ledger replicas
-- of an earlier version before this runs: one still posting charges
-- afterwards writes no rows here, and the burn rate of their wallets misses
-- those charges for the next hour.

-- +goose Up
create table ledger.wallet_burn (
    account  text collate "C" not null,
    currency text not null,
    minute   timestamptz not null,
    amount   numeric not null,
    primary key (account, currency, minute));

insert into ledger.wallet_burn (account, currency, minute, amount)
select p.account, p.currency, date_bin('1 minute', p.created_at, timestamptz '2000-01-01 00:00:00+00'), sum(p.amount)
from ledger.postings p join ledger.transactions t on t.id = p.tx_id
where t.kind = 'charge' and p.direction = 'debit' and p.created_at > now() - interval '2 hours'
group by 1, 2, 3;

-- +goose Down
drop table ledger.wallet_burn;
