-- +goose Up
-- Statements of the segregated client bank account (DESIGN §8, issue 12),
-- imported whole by POST /v1/bank-statements: the bank's own figure of the
-- client money resource, and the lines the daily reconciliation matches.
-- Rows are never updated or deleted: a corrected statement is a new one.
create table ledger.bank_statements (
    statement_id    text primary key,
    account         text not null,
    currency        text not null,
    format          text not null check (format in ('csv', 'camt053')),
    statement_date  date not null,
    closing_at      timestamptz not null,
    opening_balance numeric not null,
    closing_balance numeric not null,
    line_count      int not null,
    content_sha256  bytea not null,
    imported_at     timestamptz not null default now(),
    imported_by     text not null default ''
);
-- The report's lookup: per account, the latest statement closing at or before an instant.
create index bank_statements_currency_closing on ledger.bank_statements (currency, account, closing_at);

create table ledger.bank_statement_lines (
    statement_id text not null references ledger.bank_statements,
    line_no      int not null,
    booked_on    date not null,
    reference    text not null,
    amount       numeric not null,
    balance      numeric not null,
    primary key (statement_id, line_no)
);

-- +goose StatementBegin
create function ledger.refuse_statement_change() returns trigger language plpgsql as $$
begin
    raise exception 'ledger.%: imported statements are immutable (% refused); import a corrected statement under a new id', tg_table_name, tg_op
        using errcode = 'P0001';
end;
$$;
-- +goose StatementEnd

create trigger bank_statements_immutable before update or delete on ledger.bank_statements
    for each row execute function ledger.refuse_statement_change();
create trigger bank_statement_lines_immutable before update or delete on ledger.bank_statement_lines
    for each row execute function ledger.refuse_statement_change();

-- +goose Down
drop table ledger.bank_statement_lines;
drop table ledger.bank_statements;
drop function ledger.refuse_statement_change();
