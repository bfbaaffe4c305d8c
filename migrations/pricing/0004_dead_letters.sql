-- +goose Up
-- pricing kept undecodable usage.recorded messages in a dead_letters table of
-- its own shape; it now has the shared one of pkg/deadletter (every consumer
-- and the outbox relay), with the old rows carried over.
alter table pricing.dead_letters rename to dead_letters_0001;
create table pricing.dead_letters (
    id bigserial primary key,
    consumer text not null,
    message_id text not null,
    subject text not null,
    headers jsonb not null default '{}',
    payload bytea not null,
    error text not null,
    attempts int not null,
    first_seen_at timestamptz not null,
    last_seen_at timestamptz not null,
    replay_requested_at timestamptz,
    replayed_at timestamptz,
    unique (consumer, message_id));
create index dead_letters_replay on pricing.dead_letters (consumer) where replay_requested_at is not null and replayed_at is null;
insert into pricing.dead_letters (consumer, message_id, subject, payload, error, attempts, first_seen_at, last_seen_at)
    select 'pricing-rating', message_id, subject, payload, reason, 1, created_at, created_at
    from pricing.dead_letters_0001 order by created_at;
drop table pricing.dead_letters_0001;

-- +goose Down
drop table pricing.dead_letters;
create table pricing.dead_letters (
    message_id text primary key,
    subject text not null,
    payload bytea not null,
    reason text not null,
    created_at timestamptz not null);
