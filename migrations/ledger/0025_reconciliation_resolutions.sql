-- Reconciliation items resolved by hand: what no reference can match (an
-- Alipay T+1 settlement line for several top-ups keyed alipay:<trade_no>,
-- a bank fee, a manual entry's random key) was carried into every later run
-- as an exception, for good. Finance matches a line to movements, or writes
-- items off, with a reason; the next run no longer carries them. Each line
-- and each movement (by its first transaction) is resolved at most once.
-- Kept as they were, like the runs.

-- +goose Up
create table ledger.reconciliation_resolutions (
    resolution_id     text primary key,
    reconciliation_id text not null references ledger.reconciliations (reconciliation_id),
    action            text not null check (action in ('match', 'write_off')),
    reason            text not null check (reason <> ''),
    resolved_by       text not null,
    created_at        timestamptz not null,
    -- The request in a canonical form: the same one again answers this
    -- resolution, another naming one of its items is refused.
    request           text not null
);
create index reconciliation_resolutions_run_idx on ledger.reconciliation_resolutions (reconciliation_id);

create table ledger.reconciliation_resolution_items (
    resolution_id   text not null references ledger.reconciliation_resolutions,
    item_no         int not null,
    statement_id    text,
    line_no         int,
    booked_on       date,
    reference       text not null default '',
    bank_amount     numeric,
    movement_kind   text not null default '',
    movement_key    text not null default '',
    ledger_amount   numeric,
    transaction_id  text, -- a movement's first transaction: its identity
    transaction_ids text[] not null default '{}',
    primary key (resolution_id, item_no),
    check ((statement_id is null) <> (transaction_id is null))
);
create unique index reconciliation_resolution_items_line_idx on ledger.reconciliation_resolution_items (statement_id, line_no)
    where statement_id is not null;
create unique index reconciliation_resolution_items_movement_idx on ledger.reconciliation_resolution_items (transaction_id)
    where transaction_id is not null;
create index reconciliation_resolution_items_txs_idx on ledger.reconciliation_resolution_items using gin (transaction_ids);

create trigger reconciliation_resolutions_immutable before update or delete on ledger.reconciliation_resolutions
    for each row execute function ledger.refuse_reconciliation_change();
create trigger reconciliation_resolution_items_immutable before update or delete on ledger.reconciliation_resolution_items
    for each row execute function ledger.refuse_reconciliation_change();

-- +goose Down
drop table ledger.reconciliation_resolution_items;
drop table ledger.reconciliation_resolutions;
