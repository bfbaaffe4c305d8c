-- The settled-outside check reads a window of the claims per pass, the
-- least recently read first (checked_at, null before a first read), not
-- every claim ever made: claims of final payouts stay for good, and a pass
-- over all of them grew with history without bound. A reversal's
-- ledger.reversed message finds the claims of its transaction by
-- lower(transaction_id) (a claim keeps the id as finance typed it).
-- A replica of the version before this one, during a rolling upgrade,
-- names its columns when it claims (checked_at null: read first) and reads
-- every claim in its pass, as before.

-- +goose Up
alter table payout.settled_outside add column checked_at timestamptz;
create index settled_outside_due on payout.settled_outside (checked_at nulls first, transaction_id);
create index settled_outside_lower on payout.settled_outside (lower(transaction_id));

-- +goose Down
drop index payout.settled_outside_lower;
drop index payout.settled_outside_due;
alter table payout.settled_outside drop column checked_at;
