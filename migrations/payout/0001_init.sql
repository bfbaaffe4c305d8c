-- +goose Up
-- Payout (minimal): payout methods and KYC (owned here), and one payout per
-- settled provider, cycle and currency, created from settlement.settled.*.
create table payout.outbox (
    seq bigserial primary key,
    id text not null unique,
    subject text not null,
    payload bytea not null,
    created_at timestamptz not null default now());
create table payout.inbox (
    message_id text primary key,
    consumer text not null,
    processed_at timestamptz not null default now());

create table payout.methods (
    provider_id text primary key,
    type text not null check (type in ('bank', 'alipay', 'wechat')),
    account_name text not null default '',
    account_number text not null default '',
    alipay_id text not null default '',
    wechat_openid text not null default '',
    bank_code text not null default '',
    updated_at timestamptz not null default now());

create table payout.kyc (
    provider_id text primary key,
    status text not null check (status in ('verified', 'rejected', 'pending')),
    reference text not null default '',
    updated_at timestamptz not null default now());

create table payout.payouts (
    payout_id text primary key,
    provider_id text not null,
    cycle_id text not null,
    currency text not null,
    gross numeric not null,
    commission numeric not null,
    tax_withheld numeric not null,
    net numeric not null,
    status text not null,
    method text not null default '',
    failure_code text not null default '',
    rail_reference text not null default '',
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now(),
    unique (provider_id, cycle_id, currency));
create index payouts_provider on payout.payouts (provider_id, created_at desc);

create table payout.status_history (
    payout_id text not null references payout.payouts (payout_id),
    seq int not null,
    status text not null,
    note text not null default '',
    at timestamptz not null default now(),
    primary key (payout_id, seq));
