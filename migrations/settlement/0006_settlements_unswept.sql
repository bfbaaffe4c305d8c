-- The settled statements whose commission sweep was deferred (bank:client
-- could not fund it when the provider settled): the hourly commission sweep
-- and gpubill_settlement_commission_unswept read them, oldest first. Few
-- rows at any time, so the index stays small.

-- +goose Up
create index settlements_unswept on settlement.settlements (settled_at)
    where status = 'settled' and commission > 0 and sweep_transaction_id = '';

-- +goose Down
drop index settlement.settlements_unswept;
