-- +goose Up
-- A recorded segregation breach is part of what auditors are shown: like the
-- journal it is written once (when its transaction is posted, or by the
-- one-time backfill) and never changed; `gpubill ledger verify` derives each
-- again from its transaction's postings. The balance checkpoints stay
-- writable: the checkpoint step drops and rebuilds one a late posting landed
-- in; verify recomputes them instead.
create trigger segregation_breaches_immutable before update or delete on ledger.segregation_breaches
    for each row execute function ledger.refuse_change();
create trigger segregation_breaches_no_truncate before truncate on ledger.segregation_breaches
    for each statement execute function ledger.refuse_change();

-- +goose Down
drop trigger segregation_breaches_no_truncate on ledger.segregation_breaches;
drop trigger segregation_breaches_immutable on ledger.segregation_breaches;
