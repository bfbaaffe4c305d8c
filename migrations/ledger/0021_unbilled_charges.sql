-- A charge pricing billed at 0.00 (it rounds per lease cumulatively, so a
-- small event's charge often is) moves no money, so the journal has no
-- transaction for it; its usage (metadata as a posted charge's: lease,
-- renter, GPU model, GPU-hours) is kept here, with the provider's pending
-- account it would have credited, for the invoices and statements that
-- explain GPU-hours. Before, those hours were on neither.

-- +goose Up
create table ledger.unbilled_charges (
    charge_id text primary key,
    renter_id text not null,
    account text not null,
    currency text not null,
    metadata jsonb not null,
    created_at timestamptz not null);

create index unbilled_charges_renter on ledger.unbilled_charges (renter_id, currency, created_at);
create index unbilled_charges_account on ledger.unbilled_charges (account, currency);

-- +goose Down
drop table ledger.unbilled_charges;
