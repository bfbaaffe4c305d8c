-- Bank transfers held for finance's review. After a restore or a recovery
-- a transfer sent in a file after the point is queued again, and the
-- bank's reports copied back into the inbox take it off the queue. Three
-- kinds of report left it queued, and the release of the restore hold
-- sent it to the bank a second time: a booking at another amount (the
-- payout made again carries another net), a rejection of a duplicate (the
-- bank has the original), and a group or payment information status of a
-- batch lost with the disaster (it covers every payment of that batch,
-- which the rail can no longer name). Such a transfer now leaves the queue
-- for the state review: never cut into a batch, until finance resolves it
-- (POST /v1/bank-transfers/{end_to_end_id}:resolve: paid at the amount the
-- bank paid, or put back on the queue) or a later report of the bank
-- books, rejects or returns it. One row per review, kept with who resolved
-- it and why.

-- +goose Up
alter table payout.bank_transfers drop constraint bank_transfers_state_check;
alter table payout.bank_transfers add constraint bank_transfers_state_check
    check (state in ('queued', 'batched', 'accepted', 'booked', 'rejected', 'returned', 'review'));

create table payout.bank_transfer_reviews (
    review_id bigint generated always as identity primary key,
    reference text not null references payout.bank_transfers (reference),
    cause text not null check (cause in ('amount_mismatch', 'duplicate_rejection', 'lost_batch')),
    note text not null,
    since timestamptz not null,
    -- '' while open; paid or requeue by finance; bank when a report of
    -- the bank moved the transfer.
    resolution text not null default '' check (resolution in ('', 'paid', 'requeue', 'bank')),
    paid_amount numeric,
    resolved_by text not null default '',
    resolved_at timestamptz,
    resolution_reason text not null default '',
    check ((resolution = '') = (resolved_at is null)),
    check ((resolution = 'paid') = (paid_amount is not null)));
create unique index bank_transfer_reviews_open on payout.bank_transfer_reviews (reference) where resolved_at is null;
create index bank_transfer_reviews_by_reference on payout.bank_transfer_reviews (reference, review_id);

-- Submit reads whether a report of a lost batch was imported while held.
create index bank_file_entries_lost_batch on payout.bank_file_entries (file_id) where outcome = 'lost_batch';

-- +goose Down
drop index payout.bank_file_entries_lost_batch;
drop table payout.bank_transfer_reviews;
-- Out of review the bank may have it: batched, watched until booked (never queued: sent again).
update payout.bank_transfers set state = 'batched' where state = 'review';
alter table payout.bank_transfers drop constraint bank_transfers_state_check;
alter table payout.bank_transfers add constraint bank_transfers_state_check
    check (state in ('queued', 'batched', 'accepted', 'booked', 'rejected', 'returned'));
