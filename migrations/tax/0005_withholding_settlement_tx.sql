-- The ledger transaction that posted a withholding's settlement (posted
-- under the withholding's idempotency key), as the last remittance run found
-- it in the ledger (null: not posted, or reversed). A remittance takes only
-- withholdings whose settlement was posted: tax withheld for a settlement the
-- ledger never posted is not in tax:withheld:{jurisdiction}, and remitting it
-- paid the authority from other clients' money.

-- +goose Up
alter table tax.withholdings add column settlement_tx_id text;

-- +goose Down
alter table tax.withholdings drop column settlement_tx_id;
