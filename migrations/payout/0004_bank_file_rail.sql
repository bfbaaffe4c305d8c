-- +goose Up
-- The bank-file rail (issue 17): transfers queued for the daily ISO 20022
-- pain.001 batch, the batches (their file kept as sent), and the bank's
-- pain.002 / camt.054 files imported, with what each entry did.
create table payout.bank_batches (
    batch_id text primary key,
    cutoff_at timestamptz not null unique,
    execution_date date not null,
    transfers int not null,
    control_sum numeric not null,
    file bytea not null,
    file_sha256 text not null,
    created_at timestamptz not null,
    delivered_at timestamptz,
    delivered_path text not null default '');
create index bank_batches_undelivered on payout.bank_batches (created_at) where delivered_at is null;

-- One row per rail reference (payout attempt): what the bank was asked to
-- pay and where the bank says it is.
create table payout.bank_transfers (
    reference text primary key,
    end_to_end_id text not null unique,
    provider_id text not null,
    currency text not null,
    amount numeric not null,
    creditor_name text not null,
    creditor_account text not null,
    creditor_agent text not null,
    state text not null check (state in ('queued', 'batched', 'accepted', 'booked', 'rejected', 'returned')),
    batch_id text references payout.bank_batches (batch_id),
    pmt_inf_id text not null default '',
    reason_code text not null default '',
    failure_code text not null default '',
    failure_message text not null default '',
    submissions int not null default 1,
    queued_at timestamptz not null,
    updated_at timestamptz not null);
create index bank_transfers_queued on payout.bank_transfers (queued_at) where state = 'queued';
create index bank_transfers_batch on payout.bank_transfers (batch_id);

-- Every bank file imported once (by content hash); a second import of the
-- same bytes changes nothing and answers the first import's report.
create table payout.bank_files (
    file_id text primary key,
    sha256 text not null unique,
    kind text not null,
    message_id text not null,
    original_message_id text not null default '',
    name text not null default '',
    source text not null check (source in ('upload', 'inbox')),
    imported_at timestamptz not null);

create table payout.bank_file_entries (
    file_id text not null references payout.bank_files (file_id),
    seq int not null,
    element text not null,
    end_to_end_id text not null,
    reference text not null default '',
    bank_status text not null,
    reason_code text not null default '',
    outcome text not null,
    note text not null default '',
    primary key (file_id, seq));
create index bank_file_entries_unknown on payout.bank_file_entries (file_id) where outcome = 'unknown_reference';

-- +goose Down
drop table payout.bank_file_entries;
drop table payout.bank_files;
drop table payout.bank_transfers;
drop table payout.bank_batches;
