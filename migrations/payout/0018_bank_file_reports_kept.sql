-- A bank report can name a transfer the rail does not have yet: after a
-- restore, finance copies the bank's pain.002 and camt.054 received since
-- the recovery point into the inbox, which imports them at once, while the
-- payout made after the point is made again (its transfer queued) only
-- once its workflow runs. Such an entry was recorded unknown_reference for
-- good, the same file again answered as a duplicate, and the transfer then
-- queued went into the next file: paid twice. The file is now kept when an
-- entry of it names no transfer, and read again when a transfer of that
-- EndToEndId is queued (or the file is imported again); the release of a
-- restore hold is refused while a queued transfer is named by such an
-- entry. A file imported before this migration has no bytes kept: it is
-- read again only when imported again.

-- +goose Up
alter table payout.bank_files add column file bytea;
create index bank_file_entries_unknown_e2e on payout.bank_file_entries (end_to_end_id) where outcome = 'unknown_reference';

-- +goose Down
drop index payout.bank_file_entries_unknown_e2e;
alter table payout.bank_files drop column file;
