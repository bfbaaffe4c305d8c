-- When a provider's settlement began: the instant its prepare found the
-- provider not held and went on to the tax split and the ledger posting. From
-- then on a hold of the provider in the cycle is refused (it could no longer
-- stop the settlement); it was answered 200 and never applied. Null while the
-- provider is held or its settlement has not begun, and for rows settled
-- before this column. A pending row of a closing cycle may be mid-settlement
-- (or failed after the ledger posted it) when this runs: it counts as begun.

-- +goose Up
alter table settlement.settlements add column begun_at timestamptz;
update settlement.settlements s set begun_at = now()
where s.status = 'pending' and exists (select 1 from settlement.cycles c where c.cycle_id = s.cycle_id and c.status = 'closing');

-- +goose Down
alter table settlement.settlements drop column begun_at;
