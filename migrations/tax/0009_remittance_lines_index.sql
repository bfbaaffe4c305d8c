-- The remittance report's lines are read a page at a time per remittance,
-- by provider (ListRemittanceLines): the monthly schedule no longer
-- carries them in RemitTax's answer, which outgrew Temporal's 2 MiB result
-- limit at ~15 000 providers. Without the index each page read every
-- withholding.

-- +goose Up
create index withholdings_remittance_provider on tax.withholdings (remittance_id, provider_id) where remittance_id is not null;

-- +goose Down
drop index tax.withholdings_remittance_provider;
