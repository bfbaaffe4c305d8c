-- The restore epoch (pkg/pg.RestoreEpoch): random when made here, and a
-- new random one at each `gpubill restore` of the schema. Payout versions
-- restart from the snapshot's at a restore, so a payout changed after the
-- snapshot and changed otherwise after the restore reached a version again
-- with other content: its ETag and its webhook event id (built from the
-- version) were those issued before the restore, and a provider's
-- If-None-Match cache or a receiver deduplicating by event id kept the
-- stale change. Both carry the epoch. Random here, not empty, so a
-- snapshot taken before this migration and restored after it (no epoch
-- for the restore to replace) gets a new epoch from it all the same. One row.

-- +goose Up
create table payout.restore_epoch (
    one boolean primary key default true check (one),
    epoch text not null default left(md5(gen_random_uuid()::text), 16));
insert into payout.restore_epoch default values;

-- +goose Down
drop table payout.restore_epoch;
