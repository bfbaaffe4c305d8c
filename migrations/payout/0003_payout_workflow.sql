-- +goose Up
-- Payouts that move (issue 11): one Temporal workflow per payout
-- (payout-{id}), attempts with their rail reference, failure message,
-- expected arrival, the statements a payout pays (several when amounts
-- under the minimum joined it), provider holds, the history of payout
-- methods (masked), webhook subscriptions and deliveries, and the sandbox
-- rail's own book of transfers.
alter table payout.payouts
    add column attempt int not null default 1,
    add column submitting boolean not null default false,
    add column workflow_started boolean not null default false,
    add column failure_message text not null default '',
    add column status_reason text not null default '',
    add column method_summary text not null default '',
    add column expected_arrival date,
    add column paid_at timestamptz,
    add column absorbed_into text not null default '',
    add column version bigint not null default 1;
create index payouts_unstarted on payout.payouts (created_at) where not workflow_started;
create index payouts_provider_status on payout.payouts (provider_id, status);
create index payouts_rail_reference on payout.payouts (rail_reference) where rail_reference <> '';

-- The statements (cycle, currency, net) a payout pays.
create table payout.payout_statements (
    payout_id text not null references payout.payouts (payout_id),
    cycle_id text not null,
    currency text not null,
    net numeric not null,
    primary key (payout_id, cycle_id, currency));
insert into payout.payout_statements (payout_id, cycle_id, currency, net)
    select payout_id, cycle_id, currency, net from payout.payouts;

create table payout.holds (
    provider_id text primary key,
    reason text not null,
    held_at timestamptz not null);

-- Every payout method a provider set, masked (the live one is in methods).
create table payout.method_history (
    provider_id text not null,
    seq bigserial,
    summary text not null,
    changed_at timestamptz not null,
    primary key (provider_id, seq));

-- The sandbox rail's book (DESIGN §6): what a bank would know, by reference.
create table payout.sandbox_transfers (
    reference text primary key,
    provider_id text not null,
    currency text not null,
    amount numeric not null,
    outcome text not null check (outcome in ('paid', 'failed', 'returned')),
    submitted_at timestamptz not null,
    submissions int not null default 1);

-- Webhook subscriptions and their deliveries: a delivery row is written in
-- the transaction of the status change it announces (at least once).
create table payout.webhooks (
    webhook_id text primary key,
    provider_id text not null,
    url text not null,
    secret text not null,
    created_at timestamptz not null);
create index webhooks_provider on payout.webhooks (provider_id);

create table payout.webhook_deliveries (
    delivery_id bigserial primary key,
    webhook_id text not null references payout.webhooks (webhook_id),
    event_id text not null,
    payout_id text not null,
    payload bytea not null,
    status text not null default 'pending' check (status in ('pending', 'delivered', 'failed')),
    attempts int not null default 0,
    last_status_code int not null default 0,
    last_error text not null default '',
    next_attempt_at timestamptz not null,
    delivered_at timestamptz,
    created_at timestamptz not null,
    unique (webhook_id, event_id));
create index webhook_deliveries_due on payout.webhook_deliveries (next_attempt_at) where status = 'pending';
create index webhook_deliveries_log on payout.webhook_deliveries (webhook_id, delivery_id desc);
