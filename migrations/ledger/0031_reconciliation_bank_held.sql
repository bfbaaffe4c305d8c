-- A resolution by hand may say the bank held a movement's money all along
-- (bank_held): an opening balance, a balance brought in, which the bank
-- shows on no line and finance records in the ledger after the fact. Before,
-- the entry could only be written off, which keeps it in transit at every
-- close, so the cash difference it was made to explain stayed, run after
-- run. Replacing a check rewrites no row (the immutability triggers fire
-- on none).

-- +goose Up
alter table ledger.reconciliation_resolutions drop constraint reconciliation_resolutions_action_check;
alter table ledger.reconciliation_resolutions add constraint reconciliation_resolutions_action_check
    check (action in ('match', 'write_off', 'bank_held'));

-- +goose Down
alter table ledger.reconciliation_resolutions drop constraint reconciliation_resolutions_action_check;
alter table ledger.reconciliation_resolutions add constraint reconciliation_resolutions_action_check
    check (action in ('match', 'write_off'));
