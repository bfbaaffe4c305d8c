-- +goose Up
-- A cutoff builds as many pain.001 files as its queued transfers need
-- (each of at most 50 000): one batch row per file, numbered from 1 within
-- its cutoff (batch ids pb-YYYYMMDD-HHMM, then -02, -03 …). Every batch
-- built before is its cutoff's only file, number 1.
alter table payout.bank_batches add column file_seq int not null default 1 check (file_seq >= 1);
alter table payout.bank_batches drop constraint bank_batches_cutoff_at_key;
alter table payout.bank_batches add constraint bank_batches_cutoff_file unique (cutoff_at, file_seq);

-- +goose Down
alter table payout.bank_batches drop constraint bank_batches_cutoff_file;
alter table payout.bank_batches add constraint bank_batches_cutoff_at_key unique (cutoff_at);
alter table payout.bank_batches drop column file_seq;
