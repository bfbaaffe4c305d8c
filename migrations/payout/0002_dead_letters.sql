-- +goose Up
-- Messages this service could not apply (or, for consumer 'outbox', publish):
-- the one dead-letter policy of pkg/deadletter. The chaos test expects it empty.
create table payout.dead_letters (
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
create index dead_letters_replay on payout.dead_letters (consumer) where replay_requested_at is not null and replayed_at is null;

-- +goose Down
drop table payout.dead_letters;
