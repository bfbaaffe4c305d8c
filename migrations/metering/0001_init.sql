-- Metering: the parties (owner of providers and renters, DESIGN §1) and GPU
-- usage (validated, deduplicated on id forever, no lease overlap, DESIGN §2).

-- +goose Up
create extension if not exists btree_gist;

create table metering.outbox (
    seq bigserial primary key,
    id text not null unique,
    subject text not null,
    payload bytea not null,
    created_at timestamptz not null default now());

create table metering.inbox (
    message_id text primary key,
    consumer text not null,
    processed_at timestamptz not null default now());

-- Known GPU models; an event naming another is rejected. Rows are data:
-- adding a model is an insert, no deploy.
create table metering.gpu_models (
    gpu_model text primary key,
    vendor text not null,
    memory_gb int not null);

insert into metering.gpu_models (gpu_model, vendor, memory_gb) values
    ('RTX_3080', 'nvidia', 10), ('RTX_3090', 'nvidia', 24), ('RTX_4080', 'nvidia', 16),
    ('RTX_4090', 'nvidia', 24), ('RTX_5090', 'nvidia', 32), ('A4000', 'nvidia', 16),
    ('A5000', 'nvidia', 24), ('A6000', 'nvidia', 48), ('L4', 'nvidia', 24),
    ('L40', 'nvidia', 48), ('L40S', 'nvidia', 48), ('A10', 'nvidia', 24),
    ('A40', 'nvidia', 48), ('V100', 'nvidia', 32), ('A100', 'nvidia', 80),
    ('H100', 'nvidia', 80), ('H200', 'nvidia', 141), ('B200', 'nvidia', 192),
    ('MI250', 'amd', 128), ('MI300X', 'amd', 192);

create table metering.providers (
    provider_id text primary key,
    name text not null,
    tier text not null check (tier in ('standard', 'pro', 'partner')),
    tax_profile text not null check (tax_profile in ('individual', 'enterprise')),
    jurisdiction text not null,
    pue numeric check (pue is null or pue >= 1),
    currency text not null,
    version bigint not null,
    created_at timestamptz not null,
    updated_at timestamptz not null);

create table metering.renters (
    renter_id text primary key,
    name text not null,
    currency text not null,
    credit_limit numeric not null check (credit_limit >= 0),
    version bigint not null,
    created_at timestamptz not null,
    updated_at timestamptz not null);

-- Usage: the id is the idempotency key forever (primary key); the exclusion
-- constraint makes "the same GPU-second of a lease is recorded once" a
-- database invariant, also across concurrent ingesters.
create table metering.usage_events (
    id text primary key,
    lease_id text not null,
    provider_id text not null,
    renter_id text not null,
    gpu_model text not null,
    gpu_count int not null check (gpu_count between 1 and 64),
    start_time timestamptz not null,
    end_time timestamptz not null,
    region text not null,
    workload text not null,
    cycle_id text not null,
    status text not null,
    received_at timestamptz not null,
    check (end_time > start_time),
    constraint usage_lease_no_overlap exclude using gist (
        lease_id with =, tstzrange(start_time, end_time, '[)') with &&));

create index usage_events_renter on metering.usage_events (renter_id, start_time, id);
create index usage_events_provider on metering.usage_events (provider_id, start_time, id);
