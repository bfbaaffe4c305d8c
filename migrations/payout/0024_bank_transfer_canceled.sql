-- Bank transfers taken out of the queue by finance's cancel of their
-- payout (POST /v1/payouts/{payout_id}:cancel) before any cut: nothing was
-- sent to the bank, and the payout's amount goes back to available. The
-- row stays (state canceled, never cut), so the reference is known to the
-- rail and never submitted again; a bank report naming it is a conflict.

-- +goose Up
alter table payout.bank_transfers drop constraint bank_transfers_state_check;
alter table payout.bank_transfers add constraint bank_transfers_state_check
    check (state in ('queued', 'batched', 'accepted', 'booked', 'rejected', 'returned', 'review', 'canceled'));

-- +goose Down
-- Before this migration a canceled transfer reads as refused by the rail
-- (its payout is canceled, its workflow ended): never cut.
update payout.bank_transfers set state = 'rejected', failure_code = 'canceled',
    failure_message = 'taken out of the queue by the cancel of its payout' where state = 'canceled';
alter table payout.bank_transfers drop constraint bank_transfers_state_check;
alter table payout.bank_transfers add constraint bank_transfers_state_check
    check (state in ('queued', 'batched', 'accepted', 'booked', 'rejected', 'returned', 'review'));
