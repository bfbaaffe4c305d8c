-- When a payout hold of the transfer's provider was last released while
-- the transfer was queued. A held provider's queued transfers are left out
-- of every cut (they wait for finance, not for a cutoff): the queued age
-- (GpubillBankCutoffNotBuilt) counts from the later of queued_at and this,
-- or a transfer held for a day paged as a cutoff not built at its release.

-- +goose Up
alter table payout.bank_transfers add column hold_released_at timestamptz;

-- +goose Down
alter table payout.bank_transfers drop column hold_released_at;
