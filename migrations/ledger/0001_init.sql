-- The ledger: double-entry, append-only journal (DESIGN §4).
-- Addresses use the C collation so prefix scans use the primary key and the
-- lock order Go sorts by is the order Postgres compares by.

-- +goose Up
create table ledger.accounts (
    address    text collate "C" primary key,
    class      text not null,
    kind       text not null check (kind in ('asset', 'liability', 'income')),
    fund_pool  text not null check (fund_pool in ('client', 'house', 'tax')),
    created_at timestamptz not null default now()
);

-- One row per journal transaction. xid is the writing Postgres transaction,
-- so the chain worker can tell which rows are final without serialising writers.
create table ledger.transactions (
    id              uuid primary key,
    idempotency_key text not null unique,
    request_hash    bytea not null,
    kind            text not null check (kind in ('manual', 'deposit', 'charge', 'reversal')),
    description     text not null default '',
    effective_at    timestamptz not null,
    created_at      timestamptz not null,
    metadata        jsonb not null default '{}',
    xid             xid8 not null default pg_current_xact_id()
);
create index transactions_xid_idx on ledger.transactions (xid, id);
create index transactions_metadata_idx on ledger.transactions using gin (metadata jsonb_path_ops);

-- Postings: no foreign keys on the hot path (the writer inserts the
-- transaction and its postings in one Postgres transaction).
create table ledger.postings (
    tx_id      uuid not null,
    idx        int not null,
    account    text collate "C" not null,
    currency   text not null,
    direction  text not null check (direction in ('debit', 'credit')),
    amount     numeric not null check (amount > 0),
    created_at timestamptz not null,
    primary key (tx_id, idx)
);
-- as_of balances (sum up to an instant) and transactions by account, in order.
create index postings_account_idx on ledger.postings (account, created_at, tx_id);

-- Reversal links live apart from the immutable rows they link; original_id
-- as the key means a transaction is reversed at most once.
create table ledger.reversals (
    original_id uuid primary key,
    reversal_id uuid not null unique,
    created_at  timestamptz not null default now()
);

-- Running totals per (account, currency), updated with the postings.
create table ledger.balances (
    account    text collate "C" not null,
    currency   text not null,
    debits     numeric not null default 0,
    credits    numeric not null default 0,
    cycle_id   text,
    updated_at timestamptz not null default now(),
    primary key (account, currency)
);
create index balances_cycle_idx on ledger.balances (cycle_id, account, currency) where cycle_id is not null;

create table ledger.closed_cycles (
    cycle_id  text primary key,
    closed_at timestamptz not null
);

-- The hash chain: append-only, one row per transaction in (xid, id) order.
create table ledger.journal_chain (
    position   bigint primary key,
    tx_id      uuid not null unique,
    xid        xid8 not null,
    prev_hash  bytea not null,
    hash       bytea not null,
    chained_at timestamptz not null default now()
);

create table ledger.outbox (
    seq        bigserial primary key,
    id         text not null unique,
    subject    text not null,
    payload    bytea not null,
    created_at timestamptz not null default now()
);
create table ledger.inbox (
    message_id   text primary key,
    consumer     text not null,
    processed_at timestamptz not null default now()
);

-- +goose StatementBegin
create function ledger.refuse_change() returns trigger language plpgsql as $$
begin
    raise exception 'ledger.%: posted rows are immutable (% refused); correct by reversal', tg_table_name, tg_op
        using errcode = 'P0001';
end;
$$;
-- +goose StatementEnd

create trigger transactions_immutable before update or delete on ledger.transactions
    for each row execute function ledger.refuse_change();
create trigger transactions_no_truncate before truncate on ledger.transactions
    for each statement execute function ledger.refuse_change();
create trigger postings_immutable before update or delete on ledger.postings
    for each row execute function ledger.refuse_change();
create trigger postings_no_truncate before truncate on ledger.postings
    for each statement execute function ledger.refuse_change();
create trigger reversals_immutable before update or delete on ledger.reversals
    for each row execute function ledger.refuse_change();
create trigger journal_chain_immutable before update or delete on ledger.journal_chain
    for each row execute function ledger.refuse_change();
create trigger journal_chain_no_truncate before truncate on ledger.journal_chain
    for each statement execute function ledger.refuse_change();

-- +goose Down
drop schema ledger cascade;
