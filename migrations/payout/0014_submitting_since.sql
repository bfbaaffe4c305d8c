-- When a payout passed the gate for its current submission: a payout a
-- rail keeps refusing as malformed (a merchant key, serial or permission
-- wrong) stays created and submitting, its net in in_transit, with no way
-- out but the rail; its age is what gpubill_payout_submitting_age_seconds
-- reads (no signal showed it before). Null for payouts that passed the
-- gate before this (and while a replica of an earlier version still runs).

-- +goose Up
alter table payout.payouts add column submitting_since timestamptz;

-- +goose Down
alter table payout.payouts drop column submitting_since;
