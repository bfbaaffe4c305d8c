-- The bank-file rail's restore holds. A restore or a recovery brings the
-- rail's book back to its point while the bank keeps what it was sent
-- after it: a transfer sent in a file cut after the point was queued
-- again and went into the next file under the same EndToEndId (paid
-- twice), and a batch delivered after the point was written again.
-- gpubill restore and after-recovery open a hold in their transaction;
-- while it is open no batch is cut or delivered (the bank's reports are
-- still imported), until finance releases it
-- (POST /v1/bank-files:release-restore-hold). One row per hold, at most
-- one open.
--
-- "if not exists": a snapshot taken before this migration has no such
-- table; the restore makes it from this file to open the hold, and this
-- migration then finds it made.

-- +goose Up
create table if not exists payout.bank_file_holds (
    hold_id bigint generated always as identity primary key,
    held_since timestamptz not null,
    released_at timestamptz,
    released_by text not null default '');
create unique index if not exists bank_file_holds_open on payout.bank_file_holds ((released_at is null)) where released_at is null;

-- +goose Down
drop table payout.bank_file_holds;
