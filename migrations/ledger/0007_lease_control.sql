-- +goose Up
-- Lease control (DESIGN §4: the scheduler stops a renter's leases when its
-- wallet runs dry). renters is the ledger's read model of metering's parties
-- (party.updated.*): the credit limit in the renter's currency. lease_control
-- is where each wallet stands (ok, warned, stopped), with its stop and
-- warning counts, so each crossing is announced once. lease_webhooks is the
-- signed webhook queue to GPUBILL_LEASE_CONTROL_URL (retried with backoff,
-- in order per renter).
create table ledger.renters (
    renter_id text primary key,
    currency text not null,
    credit_limit numeric not null check (credit_limit >= 0),
    version bigint not null,
    updated_at timestamptz not null);

create table ledger.lease_control (
    renter_id text not null,
    currency text not null,
    state text not null check (state in ('ok', 'warned', 'stopped')),
    crossings bigint not null default 0,
    warnings bigint not null default 0,
    over_limit_since timestamptz,
    updated_at timestamptz not null,
    primary key (renter_id, currency));

create table ledger.lease_webhooks (
    seq bigserial not null unique,
    event_id text primary key,
    renter_id text not null,
    kind text not null,
    payload bytea not null,
    status text not null check (status in ('pending', 'delivered', 'failed')),
    attempts int not null default 0,
    last_status_code int not null default 0,
    last_error text not null default '',
    next_attempt_at timestamptz not null,
    created_at timestamptz not null,
    delivered_at timestamptz);
-- A renter's webhooks go out in order: one is sent only when every earlier
-- one of the renter is delivered or given up.
create index lease_webhooks_pending on ledger.lease_webhooks (renter_id, seq) where status = 'pending';

-- +goose Down
drop table ledger.lease_webhooks;
drop table ledger.lease_control;
drop table ledger.renters;
