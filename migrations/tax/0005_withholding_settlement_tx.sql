-- The ledger transaction that posted a withholding's settlement (posted
-- under the withholding's idempotency key), recorded when a remittance finds
-- it in the ledger. A remittance takes only withholdings whose settlement was
-- posted: tax withheld for a settlement the ledger never posted is not in
-- tax:withheld:{jurisdiction}, and remitting it paid the authority from
-- other clients' money.

-- +goose Up
alter table tax.withholdings add column settlement_tx_id text;
create index withholdings_unposted on tax.withholdings (withholding_id)
    where settlement_tx_id is null and remittance_id is null;

-- +goose Down
drop index tax.withholdings_unposted;
alter table tax.withholdings drop column settlement_tx_id;
