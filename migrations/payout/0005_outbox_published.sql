-- Published outbox messages are kept (pkg/outbox) until every durable
-- consumer of their stream has acked past them, so a database snapshot
-- holds what JetStream still held for its consumers: a restore moves them
-- back into the outbox and the relay publishes them again (the consumers'
-- inboxes skip those already applied). seq is the outbox row's own, so a
-- restore puts them back in their original order.

-- +goose Up
create table payout.outbox_published (
    seq          bigint primary key,
    id           text not null,
    subject      text not null,
    payload      bytea not null,
    created_at   timestamptz not null,
    published_at timestamptz not null default now(),
    stream       text not null,
    stream_seq   bigint not null
);
create index outbox_published_stream_idx on payout.outbox_published (stream, stream_seq);
-- +goose StatementBegin
do $$
begin
    if exists (select 1 from pg_settings where name = 'default_toast_compression' and 'lz4' = any(enumvals)) then
        alter table payout.outbox_published alter column payload set compression lz4;
    end if;
end
$$;
-- +goose StatementEnd

-- +goose Down
drop table payout.outbox_published;
