-- Segregation breaches are classified by kind: a movement across the pools
-- is sanctioned only when settlement posts it (metadata kind settlement or
-- commission_sweep) or a reversal mirrors a transaction. Before, a finance
-- entry of a sanctioned shape passed. The ledger classifies every
-- transaction again at start-up (BackfillBreaches) and marks this done;
-- verify applies the rule by shape until then.

-- +goose Up
insert into ledger.report_backfills (name) values ('segregation_breaches_by_kind');

-- +goose Down
delete from ledger.report_backfills where name = 'segregation_breaches_by_kind';
