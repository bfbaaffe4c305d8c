-- Pricing: rate card versions, per-lease cumulative rounding state, monthly
-- volume per renter, rated charges with their lines, and usage waiting for a
-- rate card (never silently dropped).

-- +goose Up
create table pricing.outbox (
    seq bigserial primary key,
    id text not null unique,
    subject text not null,
    payload bytea not null,
    created_at timestamptz not null default now());

create table pricing.inbox (
    message_id text primary key,
    consumer text not null,
    processed_at timestamptz not null default now());

-- body is the CreateRateCardRequest (protobuf binary) the card was made from:
-- a replay with the same id compares bodies (same = original, else 409).
create table pricing.rate_cards (
    rate_card_id text primary key,
    currency text not null,
    effective_from timestamptz not null,
    body bytea not null,
    seq bigserial not null unique,
    created_at timestamptz not null);

create index rate_cards_currency on pricing.rate_cards (currency, effective_from desc, seq desc);

-- Cumulative rounding per lease: exact_ps is the exact total in price-seconds
-- (amount x 3600, so GPU-seconds x hourly stays an exact decimal); billed is
-- what charges have billed so far, always round(exact_ps / 3600).
create table pricing.lease_totals (
    lease_id text not null,
    currency text not null,
    exact_ps numeric not null,
    billed numeric not null,
    updated_at timestamptz not null,
    primary key (lease_id, currency));

-- GPU-microseconds per renter per calendar month (UTC), for graduated tiers.
create table pricing.tier_usage (
    renter_id text not null,
    month text not null,
    gpu_micros bigint not null,
    primary key (renter_id, month));

create table pricing.charges (
    charge_id text primary key,
    source_id text not null,
    lease_id text not null,
    renter_id text not null,
    provider_id text not null,
    cycle_id text not null,
    currency text not null,
    amount numeric not null,
    exact_amount numeric not null,
    exact_ps numeric not null,
    event_ids text[] not null,
    effective_at timestamptz not null,
    created_at timestamptz not null);

create index charges_lease on pricing.charges (lease_id);
create index charges_renter on pricing.charges (renter_id, effective_at);

create table pricing.charge_lines (
    charge_id text not null,
    line_no int not null,
    kind text not null,
    gpu_model text not null,
    gpu_count int not null,
    band text not null,
    tier text not null,
    rate_card_id text not null,
    start_time timestamptz not null,
    end_time timestamptz not null,
    gpu_hours numeric not null,
    unit_price numeric not null,
    multiplier numeric not null,
    amount numeric not null,
    primary key (charge_id, line_no));

-- Usage no rate card can price yet (no card for the currency or model):
-- visible with its reason, retried when a card appears.
create table pricing.pending_rating (
    event_id text primary key,
    message_id text not null,
    renter_id text not null,
    currency text not null,
    gpu_model text not null,
    payload bytea not null,
    reason text not null,
    attempts int not null default 1,
    created_at timestamptz not null,
    last_attempt_at timestamptz not null);

-- Messages that cannot be decoded: kept, never retried in a loop.
create table pricing.dead_letters (
    message_id text primary key,
    subject text not null,
    payload bytea not null,
    reason text not null,
    created_at timestamptz not null);
