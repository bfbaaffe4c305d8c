-- A rail_refund takes at most what its deposit (metadata.external_ref)
-- brought in, less the rail_refunds naming that deposit already recorded
-- (the posting transaction sums them under the wallet's balance lock):
-- this partial index finds those few rows without walking the journal.
-- It holds rail_refund entries only, so it costs other writes nothing.
-- Built concurrently; an index a failed build left invalid is dropped
-- first (if not exists would keep it).

-- +goose NO TRANSACTION
-- +goose Up
drop index concurrently if exists ledger.transactions_rail_refund_idx;
create index concurrently transactions_rail_refund_idx on ledger.transactions ((metadata->>'external_ref'))
    where metadata->>'kind' = 'rail_refund';

-- +goose Down
drop index concurrently if exists ledger.transactions_rail_refund_idx;
