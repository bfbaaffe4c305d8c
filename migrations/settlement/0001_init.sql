-- +goose Up
-- Settlement: cycles, the per-provider settlement rows (one per provider,
-- cycle and currency: the snapshot of gross taken at close, then the split,
-- the ledger transactions and the statement), holds, and the provider tier
-- read model (parties are owned by metering).
create table settlement.outbox (
    seq bigserial primary key,
    id text not null unique,
    subject text not null,
    payload bytea not null,
    created_at timestamptz not null default now());
create table settlement.inbox (
    message_id text primary key,
    consumer text not null,
    processed_at timestamptz not null default now());

create table settlement.providers (
    provider_id text primary key,
    tier text not null,
    version bigint not null default 0,
    updated_at timestamptz not null default now());

create table settlement.cycles (
    cycle_id text primary key,
    status text not null check (status in ('open', 'closing', 'settled')),
    starts_at timestamptz not null,
    ends_at timestamptz not null,
    closes_at timestamptz not null,
    closed_at timestamptz,
    settled_at timestamptz,
    snapshot_done boolean not null default false,
    close_reason text not null default '');

-- status: pending (gross snapshotted), held (finance hold), settled.
create table settlement.settlements (
    cycle_id text not null references settlement.cycles (cycle_id),
    provider_id text not null,
    currency text not null,
    gross numeric not null,
    status text not null default 'pending' check (status in ('pending', 'held', 'settled')),
    tier text not null default '',
    commission_rate numeric,
    commission numeric,
    tax_withheld numeric,
    net numeric,
    jurisdiction text not null default '',
    rule_set text not null default '',
    rule_version text not null default '',
    withholding_id text not null default '',
    transaction_id text not null default '',
    sweep_transaction_id text not null default '',
    lines jsonb not null default '[]',
    settled_at timestamptz,
    primary key (cycle_id, provider_id, currency));
create index settlements_provider on settlement.settlements (provider_id, cycle_id);

create table settlement.holds (
    cycle_id text not null,
    provider_id text not null,
    held boolean not null,
    reason text not null default '',
    updated_at timestamptz not null default now(),
    primary key (cycle_id, provider_id));
