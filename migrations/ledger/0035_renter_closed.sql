-- A renter closed by metering (PATCH /v1/renters/{id} status closed,
-- party.updated status "closed"): lease control stops its GPUs whatever
-- its balance and never resumes them. NULL: open. Adding a nullable column
-- rewrites no row.

-- +goose Up
alter table ledger.renters add column closed_at timestamptz;

-- +goose Down
alter table ledger.renters drop column closed_at;
