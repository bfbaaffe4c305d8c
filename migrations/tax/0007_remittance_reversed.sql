-- A remittance whose ledger transaction was reversed (POST
-- /v1/transactions/{id}:reverse) read remitted for good: its tax was back in
-- tax:withheld:{jurisdiction} and no run paid it again. A run that finds the
-- reversal marks it reversed (reversed_by: the reversing transaction) and
-- gives its withholdings back to its period, whose next remittance of the
-- jurisdiction and currency pays them under another id (the ledger key: the
-- reversed one's answers the reversed transaction). So a period holds one
-- remittance per jurisdiction and currency not reversed, and any reversed.

-- +goose Up
alter table tax.remittances drop constraint remittances_status_check;
alter table tax.remittances add constraint remittances_status_check check (status in ('pending', 'remitted', 'reversed'));
alter table tax.remittances add column reversed_by text not null default '';
alter table tax.remittances add column reversed_at timestamptz;
alter table tax.remittances drop constraint remittances_period_jurisdiction_currency_key;
create unique index remittances_live on tax.remittances (period, jurisdiction, currency) where status <> 'reversed';

-- +goose Down
-- Fails while a reversed remittance is recorded (the constraints below
-- refuse it): that history is not thrown away.
drop index tax.remittances_live;
alter table tax.remittances add constraint remittances_period_jurisdiction_currency_key unique (period, jurisdiction, currency);
alter table tax.remittances drop column reversed_at;
alter table tax.remittances drop column reversed_by;
alter table tax.remittances drop constraint remittances_status_check;
alter table tax.remittances add constraint remittances_status_check check (status in ('pending', 'remitted'));
