-- Renter invoices (one per renter, currency and calendar month in the tax
-- zone), numbered YYYY-NNNNNN without gaps per year: the year's counter row
-- moves in the same transaction as the invoice is inserted, so a failed or
-- refused issue rolls its number back and concurrent issuers queue on the
-- row. Issued invoices are documents: never updated or deleted.

-- +goose Up
create table ledger.invoice_counters (
    year        int primary key,
    last_number bigint not null check (last_number > 0)
);

create table ledger.invoices (
    invoice_id      text primary key,
    number          text not null unique,
    year            int not null,
    seq             bigint not null,
    renter_id       text not null,
    currency        text not null,
    period          text not null,
    time_zone       text not null,
    period_start    timestamptz not null,
    period_end      timestamptz not null,
    issued_at       timestamptz not null,
    opening_balance numeric not null,
    deposits        numeric not null,
    charges         numeric not null,
    adjustments     numeric not null,
    closing_balance numeric not null,
    tier_discounts  numeric not null,
    surcharges      numeric not null,
    lines           jsonb not null,
    deposit_entries jsonb not null,
    unique (renter_id, currency, period),
    unique (year, seq)
);
create index invoices_renter on ledger.invoices (renter_id, period desc, currency, invoice_id);

create trigger invoices_immutable before update or delete on ledger.invoices
    for each row execute function ledger.refuse_change();
create trigger invoices_no_truncate before truncate on ledger.invoices
    for each statement execute function ledger.refuse_change();

-- +goose Down
drop table ledger.invoices;
drop table ledger.invoice_counters;
