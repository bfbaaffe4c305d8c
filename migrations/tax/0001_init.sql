-- +goose Up
-- Tax: the tax profile read model (parties are owned by metering), the
-- versioned, effective-dated rule table and rule selections, withholdings
-- (one per provider, cycle and currency; each is also its certificate) and
-- remittances.
create table tax.outbox (
    seq bigserial primary key,
    id text not null unique,
    subject text not null,
    payload bytea not null,
    created_at timestamptz not null default now());
create table tax.inbox (
    message_id text primary key,
    consumer text not null,
    processed_at timestamptz not null default now());

create table tax.profiles (
    provider_id text primary key,
    tax_profile text not null default 'individual',
    jurisdiction text not null default 'CN',
    version bigint not null default 0,
    updated_at timestamptz not null default now());

-- A rule version: the computation is named by rule_set (pkg/split implements
-- each set); jurisdiction '' applies anywhere.
create table tax.rules (
    rule_set text not null,
    rule_version text not null,
    jurisdiction text not null default '',
    effective_from timestamptz not null,
    effective_until timestamptz,
    is_default boolean not null default false,
    description text not null default '',
    primary key (rule_set, rule_version));

insert into tax.rules (rule_set, rule_version, jurisdiction, effective_from, is_default, description) values
    ('flat20', '1', '', '2026-01-01T00:00:00Z', true,
     'Default: individuals 20 % of (gross - commission); enterprises 0 % (they file themselves).'),
    ('cn_labour', '1', 'CN', '2026-01-01T00:00:00Z', false,
     'China labour remuneration, per payment: 800 deduction up to 4 000, else 20 %; then 20/30/40 % brackets with quick deductions 0/2 000/7 000. Enterprises 0 %.');

-- scope: 'jurisdiction:{j}' or 'provider:{id}'.
create table tax.rule_selections (
    scope text primary key,
    rule_set text not null,
    updated_at timestamptz not null default now());

create table tax.withholdings (
    withholding_id text primary key,
    idempotency_key text not null unique,
    provider_id text not null,
    cycle_id text not null,
    currency text not null,
    gross numeric not null,
    commission_rate numeric,
    commission numeric not null,
    taxable_base numeric not null,
    tax_withheld numeric not null,
    net numeric not null,
    tax_profile text not null,
    jurisdiction text not null,
    rule_set text not null,
    rule_version text not null,
    certificate_id text not null unique,
    remittance_id text,
    created_at timestamptz not null default now());
create index withholdings_provider on tax.withholdings (provider_id, cycle_id);
create index withholdings_unremitted on tax.withholdings (created_at) where remittance_id is null;

create table tax.remittances (
    remittance_id text primary key,
    period text not null,
    jurisdiction text not null,
    currency text not null,
    amount numeric not null,
    status text not null check (status in ('pending', 'remitted')),
    reference text not null default '',
    transaction_id text not null default '',
    created_at timestamptz not null default now(),
    remitted_at timestamptz,
    unique (period, jurisdiction, currency));
