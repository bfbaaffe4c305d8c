-- +goose Up
-- The audit log (DESIGN §7): every write any service served, from the
-- audit.recorded.{service} subject. Append-only like the journal: rows are
-- never updated or deleted (enforced here, not by convention).
create table ledger.audit_events (
    seq bigserial primary key,
    event_id text not null unique,
    at timestamptz not null,
    service text not null,
    method text not null,
    actor text not null,
    role text not null,
    resource_ids text[] not null,
    request_id text not null,
    code text not null,
    client_addr text not null,
    stored_at timestamptz not null default now()
);
create index audit_events_at on ledger.audit_events (at);
create index audit_events_actor on ledger.audit_events (actor, seq);
create index audit_events_method on ledger.audit_events (method, seq);

-- +goose StatementBegin
create function ledger.refuse_audit_change() returns trigger language plpgsql as $$
begin
    raise exception 'ledger.audit_events is append-only (% refused)', tg_op using errcode = 'P0001';
end;
$$;
-- +goose StatementEnd

create trigger audit_events_immutable before update or delete on ledger.audit_events
    for each row execute function ledger.refuse_audit_change();
create trigger audit_events_no_truncate before truncate on ledger.audit_events
    for each statement execute function ledger.refuse_audit_change();

-- +goose Down
drop table ledger.audit_events;
drop function ledger.refuse_audit_change();
