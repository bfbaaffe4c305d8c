-- A payout finance paid by hand in several bank transfers is settled
-- outside by several ledger transactions: one claim per transaction, each
-- transaction still paying one payout (transaction_id stays unique), their
-- sum the payout's net (checked by the service under the payout's lock).

-- +goose Up
alter table payout.settled_outside drop constraint settled_outside_pkey;
alter table payout.settled_outside add primary key (payout_id, transaction_id);

-- +goose Down
-- Fails while a payout holds several claims: release them first.
alter table payout.settled_outside drop constraint settled_outside_pkey;
alter table payout.settled_outside add primary key (payout_id);
