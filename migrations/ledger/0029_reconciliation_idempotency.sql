-- A run may carry an idempotency key (the daily schedule's: its workflow
-- id, one per scheduled run): a request with a key a run of the currency
-- holds answers that run instead of running anew. Each retry of the
-- schedule's activity (an answer lost, refused as too large) stored a new
-- full run before. Adding a nullable column rewrites no row (the
-- immutability triggers fire on none).

-- +goose Up
alter table ledger.reconciliations add column idempotency_key text;
create unique index reconciliations_idempotency_idx on ledger.reconciliations (currency, idempotency_key)
    where idempotency_key is not null;

-- +goose Down
drop index ledger.reconciliations_idempotency_idx;
alter table ledger.reconciliations drop column idempotency_key;
