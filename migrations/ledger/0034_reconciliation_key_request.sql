-- A run's idempotency key answers it only for the request that made it:
-- requested_currency is that request's currency ('' for every currency
-- with a statement), so a key reused for another request is refused (409)
-- instead of silently answering a run of another request. NULL on the runs
-- stored before (their request was not kept: a reuse of their key is judged
-- by its age only). The keys are looked up across currencies, by key.
-- Adding a nullable column rewrites no row (the immutability triggers fire
-- on none).

-- +goose Up
alter table ledger.reconciliations add column requested_currency text;
create index reconciliations_key_idx on ledger.reconciliations (idempotency_key, seq)
    where idempotency_key is not null;

-- +goose Down
drop index ledger.reconciliations_key_idx;
alter table ledger.reconciliations drop column requested_currency;
