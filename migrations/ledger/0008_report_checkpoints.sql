-- +goose Up
-- The segregated-funds report (DESIGN §8, issue 12) reads no journal history:
-- breaches are classified when posted and kept here; balances as of an
-- instant are the latest checkpoint at or before it plus the postings since.

-- Every transaction that moved value between the client and house pools
-- other than by DESIGN §4's movements, one row per house-pool posting,
-- written by the journal writer in the transaction that posts it.
create table ledger.segregation_breaches (
    tx_id        uuid not null,
    seq          int not null,
    account      text not null,
    currency     text not null,
    from_pool    text not null,
    to_pool      text not null,
    amount       numeric not null,
    reason       text not null,
    effective_at timestamptz not null,
    created_at   timestamptz not null,
    primary key (tx_id, seq)
);
create index segregation_breaches_currency on ledger.segregation_breaches (currency, created_at, tx_id, seq);

-- A checkpoint at `at` holds, per (currency, account), debits - credits of
-- every posting created at or before `at` (zero sums left out). postings is
-- how many postings it folded in after the previous checkpoint, so a posting
-- committed late into that interval is noticed and the checkpoint rebuilt.
-- The balance rows are written first, in short batches, and the header
-- last: a checkpoint exists for readers once its header does (no foreign
-- key, so the rows can precede it).
create table ledger.balance_checkpoints (
    at       timestamptz primary key,
    prev_at  timestamptz,
    postings bigint not null,
    made_at  timestamptz not null default now()
);
create table ledger.checkpoint_balances (
    at        timestamptz not null,
    currency  text not null,
    account   text collate "C" not null,
    net_debit numeric not null,
    primary key (at, currency, account)
);

-- Postings by creation time, for "the postings since a checkpoint": a BRIN
-- index costs the writer next to nothing (rows arrive in time order).
create index postings_created_brin on ledger.postings using brin (created_at) with (pages_per_range = 32);

-- The journal head as of an instant: the last link chained at or before it.
create index journal_chain_chained_at on ledger.journal_chain (chained_at, position);

-- One-time jobs at start-up (breaches of transactions posted before this
-- migration are classified once).
create table ledger.report_backfills (
    name    text primary key,
    done_at timestamptz
);
insert into ledger.report_backfills (name) values ('segregation_breaches');

-- +goose Down
drop table ledger.report_backfills;
drop index ledger.journal_chain_chained_at;
drop index ledger.postings_created_brin;
drop table ledger.checkpoint_balances;
drop table ledger.balance_checkpoints;
drop table ledger.segregation_breaches;
