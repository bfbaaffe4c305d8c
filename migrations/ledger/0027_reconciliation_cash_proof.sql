-- A reconciliation run proves cash at the close of each statement it
-- takes (the latest one taken when it takes none): bank:client in the
-- ledger at that instant, plus the bank lines the ledger does not hold by
-- then, less the ledger movements the bank does not show by then, is the
-- accounts' closing balance, exactly. A difference is an item of its own
-- (cash_difference) and the run is not reconciled. Before, a balance no
-- line explains (an account opening with money the ledger never recorded,
-- a bank:client movement no run took) left every item matched and the run
-- reconciled. Adding columns and replacing a check rewrites no row (the
-- immutability triggers fire on none).

-- +goose Up
alter table ledger.reconciliations add column cash_difference_count int not null default 0;
alter table ledger.reconciliation_items drop constraint reconciliation_items_status_check;
alter table ledger.reconciliation_items add constraint reconciliation_items_status_check
    check (status in ('matched', 'unmatched_bank', 'unmatched_ledger', 'statement_break', 'cash_difference'));
-- A cash difference: statement_id and account name the statement, bank_amount
-- holds the difference, opening_balance is unused; the figures of the proof:
alter table ledger.reconciliation_items add column closing_at timestamptz;
alter table ledger.reconciliation_items add column closing_balance numeric;
alter table ledger.reconciliation_items add column ledger_balance numeric;
alter table ledger.reconciliation_items add column in_transit_bank numeric;
alter table ledger.reconciliation_items add column in_transit_ledger numeric;
-- The proof reads the matched items whose two sides fall either side of a
-- close: by when the movement was recorded, and by the line's statement.
create index reconciliation_items_matched_recorded_idx on ledger.reconciliation_items (recorded_at) where status = 'matched';
create index reconciliation_items_matched_statement_idx on ledger.reconciliation_items (statement_id) where status = 'matched';

-- +goose Down
drop index ledger.reconciliation_items_matched_statement_idx;
drop index ledger.reconciliation_items_matched_recorded_idx;
alter table ledger.reconciliation_items drop column in_transit_ledger;
alter table ledger.reconciliation_items drop column in_transit_bank;
alter table ledger.reconciliation_items drop column ledger_balance;
alter table ledger.reconciliation_items drop column closing_balance;
alter table ledger.reconciliation_items drop column closing_at;
alter table ledger.reconciliation_items drop constraint reconciliation_items_status_check;
alter table ledger.reconciliation_items add constraint reconciliation_items_status_check
    check (status in ('matched', 'unmatched_bank', 'unmatched_ledger', 'statement_break'));
alter table ledger.reconciliations drop column cash_difference_count;
