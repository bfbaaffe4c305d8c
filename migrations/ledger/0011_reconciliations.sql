-- Bank reconciliation runs (issue 12): each run of a currency matches the
-- statement lines no run has taken (and those the previous run left
-- unmatched) to the bank:client movements chained since the previous run
-- (and those it left unmatched), and is kept as it was for finance and
-- auditors. Rows are never updated or deleted.

-- +goose Up
create table ledger.reconciliations (
    seq                   bigserial primary key,
    reconciliation_id     text not null unique,
    currency              text not null,
    trigger               text not null check (trigger in ('schedule', 'request')),
    requested_by          text not null default '',
    created_at            timestamptz not null,
    previous_id           text not null default '',
    journal_head_hash     text not null,
    journal_head_position bigint not null,
    bank_closing_balance  numeric,
    ledger_bank_client    numeric not null,
    verdict               text not null check (verdict in ('reconciled', 'exceptions')),
    matched_count         int not null,
    unmatched_bank_count  int not null,
    unmatched_ledger_count int not null
);
create index reconciliations_currency_idx on ledger.reconciliations (currency, seq);

-- Each statement is taken by exactly one run.
create table ledger.reconciliation_statements (
    statement_id      text primary key references ledger.bank_statements,
    reconciliation_id text not null references ledger.reconciliations (reconciliation_id)
);
create index reconciliation_statements_run_idx on ledger.reconciliation_statements (reconciliation_id);

create table ledger.reconciliation_items (
    reconciliation_id text not null references ledger.reconciliations (reconciliation_id),
    item_no           int not null,
    status            text not null check (status in ('matched', 'unmatched_bank', 'unmatched_ledger')),
    statement_id      text not null default '',
    line_no           int not null default 0,
    booked_on         date,
    reference         text not null default '',
    bank_amount       numeric,
    movement_kind     text not null default '',
    movement_key      text not null default '',
    ledger_amount     numeric,
    transaction_ids   text[] not null default '{}',
    reason            text not null default '',
    primary key (reconciliation_id, item_no)
);

-- +goose StatementBegin
create function ledger.refuse_reconciliation_change() returns trigger language plpgsql as $$
begin
    raise exception 'ledger.%: reconciliation runs are kept as they were (% refused); run a new one', tg_table_name, tg_op
        using errcode = 'P0001';
end;
$$;
-- +goose StatementEnd

create trigger reconciliations_immutable before update or delete on ledger.reconciliations
    for each row execute function ledger.refuse_reconciliation_change();
create trigger reconciliation_statements_immutable before update or delete on ledger.reconciliation_statements
    for each row execute function ledger.refuse_reconciliation_change();
create trigger reconciliation_items_immutable before update or delete on ledger.reconciliation_items
    for each row execute function ledger.refuse_reconciliation_change();

-- +goose Down
drop table ledger.reconciliation_items;
drop table ledger.reconciliation_statements;
drop table ledger.reconciliations;
drop function ledger.refuse_reconciliation_change();
