-- The restore epoch (pkg/pg.RestoreEpoch): random when made here, and a
-- new random one at each `gpubill restore` of the schema. Lease control's
-- crossing and warning counts restart from the snapshot's at a restore, so
-- a renter stopped after the snapshot and stopped again after the restore
-- got the same lease event id (renter, currency, crossing, kind) twice: the
-- marketplace scheduler, applying each id once, left the second stop
-- undone and the renter's GPUs running on an empty wallet. Lease event ids
-- carry the epoch. Random here, not empty, so a snapshot taken before this
-- migration and restored after it gets a new epoch from it all the same.
-- One row.

-- +goose Up
create table ledger.restore_epoch (
    one boolean primary key default true check (one),
    epoch text not null default left(md5(gen_random_uuid()::text), 16));
insert into ledger.restore_epoch default values;

-- +goose Down
drop table ledger.restore_epoch;
