-- +goose Up
-- The audit log, hash-chained as the journal is (DESIGN §7): the role every
-- service connects as owns ledger.audit_events and may disable its
-- append-only trigger, and a record deleted or edited that way left no
-- trace. Each record now carries prev_hash (its predecessor's hash in seq
-- order; the first's is 32 zero bytes) and hash = sha256(prev_hash ||
-- content), the content laid out as domain.AuditHash lays it out, which
-- the ledger's audit writer computes in the batch it stores and ledger
-- verify recomputes. ledger.audit_hash renders the same bytes here, to
-- chain the records stored before this migration (one pass in seq order,
-- under this migration's lock on the table) and for the
-- gpubill_ledger_audit_chain_breaks gauge; verify does not call it (the
-- owner may replace a function).
--
-- The pass only computes the links, into a temporary table, and one UPDATE
-- joined on seq stores them: an UPDATE per record took 154 to 242 s for
-- 1 000 000 records (570 MB) on two machines, this 43 to 53 s. The ledger
-- migrates at start-up (a Recreate Deployment, 30 minutes to start): one
-- UPDATE per record, a log past about 7.5 million records was never
-- chained, the pod killed mid-migration and the migration rolled back at
-- every start.
--
-- Seqs: the writer now gives each record the seq after the last one, under
-- the lock it already took to commit in seq order, so seqs are consecutive
-- from here on (a failed COPY is retried with the same seqs). The records
-- before keep their seqs, and their gaps (the old writer's failed COPYs
-- skipped the numbers they had drawn): the chain runs over consecutive
-- records whatever their seqs, so a record deleted from a gap breaks it as
-- any other. The sequence is dropped: an insert that is not the chain's
-- has no seq, and fails.
alter table ledger.audit_events add column prev_hash bytea, add column hash bytea;

-- +goose StatementBegin
create function ledger.audit_field(s text) returns bytea language sql stable strict parallel safe as $$
    select int8send(length(convert_to(s, 'UTF8'))::bigint) || convert_to(s, 'UTF8')
$$;
-- +goose StatementEnd

-- +goose StatementBegin
create function ledger.audit_micros(t timestamptz) returns bytea language sql stable strict parallel safe as $$
    select int8send((extract(epoch from t) * 1000000)::bigint)
$$;
-- +goose StatementEnd

-- +goose StatementBegin
create function ledger.audit_hash(prev bytea, e ledger.audit_events) returns bytea language sql stable parallel safe as $$
    select sha256(prev || int8send(e.seq) || ledger.audit_field(e.event_id) || ledger.audit_micros(e.at)
        || ledger.audit_field(e.service) || ledger.audit_field(e.method) || ledger.audit_field(e.actor) || ledger.audit_field(e.role)
        || int8send(coalesce(cardinality(e.resource_ids), 0)::bigint)
        || coalesce((select string_agg(ledger.audit_field(r), ''::bytea order by n) from unnest(e.resource_ids) with ordinality u(r, n)), ''::bytea)
        || ledger.audit_field(e.request_id) || ledger.audit_field(e.code) || ledger.audit_field(e.client_addr)
        || ledger.audit_micros(e.stored_at))
$$;
-- +goose StatementEnd

alter table ledger.audit_events disable trigger audit_events_immutable;

-- +goose StatementBegin
do $$
declare
    prev bytea := decode(repeat('00', 32), 'hex');
    link bytea;
    r ledger.audit_events;
begin
    create temporary table audit_chain (seq bigint not null, prev_hash bytea not null, hash bytea not null) on commit drop;
    for r in select * from ledger.audit_events order by seq loop
        link := ledger.audit_hash(prev, r);
        insert into audit_chain values (r.seq, prev, link);
        prev := link;
    end loop;
    analyze audit_chain;
    update ledger.audit_events a set prev_hash = c.prev_hash, hash = c.hash from audit_chain c where c.seq = a.seq;
end;
$$;
-- +goose StatementEnd

alter table ledger.audit_events enable trigger audit_events_immutable;

alter table ledger.audit_events alter column prev_hash set not null, alter column hash set not null, alter column seq drop default;
drop sequence ledger.audit_events_seq_seq;

-- +goose Down
create sequence ledger.audit_events_seq_seq owned by ledger.audit_events.seq;
select setval('ledger.audit_events_seq_seq', coalesce(max(seq), 0) + 1, false) from ledger.audit_events;
alter table ledger.audit_events alter column seq set default nextval('ledger.audit_events_seq_seq');
drop function ledger.audit_hash(bytea, ledger.audit_events);
drop function ledger.audit_micros(timestamptz);
drop function ledger.audit_field(text);
alter table ledger.audit_events drop column prev_hash, drop column hash;
