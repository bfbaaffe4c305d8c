-- A reconciliation run checks that each account's statements follow on (in
-- the order of their close): a statement opening at another balance than
-- the one before it closes at (a statement missing between them, or a
-- period covered twice) is a break, an item of the run, and the run is not
-- reconciled. Before, a missing statement's lines (a bank fee) were on no
-- statement any run took and every run reconciled. Each run finds the
-- breaks again over every statement, so one clears once the missing
-- statement is imported. Adding columns and replacing a check rewrites no
-- row (the immutability triggers fire on none).

-- +goose Up
alter table ledger.reconciliations add column statement_break_count int not null default 0;
alter table ledger.reconciliation_items drop constraint reconciliation_items_status_check;
alter table ledger.reconciliation_items add constraint reconciliation_items_status_check
    check (status in ('matched', 'unmatched_bank', 'unmatched_ledger', 'statement_break'));
-- A break: statement_id and its opening balance, the account's statement
-- before it and its closing balance; bank_amount holds the difference.
alter table ledger.reconciliation_items add column account text not null default '';
alter table ledger.reconciliation_items add column previous_statement_id text not null default '';
alter table ledger.reconciliation_items add column previous_closing_balance numeric;
alter table ledger.reconciliation_items add column opening_balance numeric;

-- +goose Down
alter table ledger.reconciliation_items drop column opening_balance;
alter table ledger.reconciliation_items drop column previous_closing_balance;
alter table ledger.reconciliation_items drop column previous_statement_id;
alter table ledger.reconciliation_items drop column account;
alter table ledger.reconciliation_items drop constraint reconciliation_items_status_check;
alter table ledger.reconciliation_items add constraint reconciliation_items_status_check
    check (status in ('matched', 'unmatched_bank', 'unmatched_ledger'));
alter table ledger.reconciliations drop column statement_break_count;
