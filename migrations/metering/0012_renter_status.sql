-- A renter can be closed (PATCH /v1/renters/{id} status closed): its usage
-- that starts at or after closed_at is refused, the ledger stops its GPUs
-- whatever its balance. Closed is final. Adding a column with a constant
-- default rewrites no row.

-- +goose Up
alter table metering.renters
    add column status text not null default 'active' check (status in ('active', 'closed')),
    add column closed_at timestamptz,
    add constraint renters_closed_at check ((status = 'closed') = (closed_at is not null));

-- +goose Down
alter table metering.renters drop constraint renters_closed_at, drop column closed_at, drop column status;
