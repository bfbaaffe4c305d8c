-- When invoice runs began to be recorded, for GpubillInvoicesNotIssued.
-- 0026 asked for every month after the first recorded one, and three
-- readings were false: a month re-run by hand (finance issuing 2025-03
-- again) became the first, and every month since it with no record (all
-- those before the upgrade) read unissued; a fresh install, no month
-- recorded, read 0 for ever, its first monthly run never happening or
-- not; and an upgrade whose latest invoiced month was older than last
-- month (no wallet moved since) read the months after it unissued at once.
-- As tax.remittance_runs_from: the months that ended before this instant
-- are not asked for (nothing says whether their run completed), every
-- month that ends after it is, whatever month is run again by hand. One
-- row, set here (an upgrade's or a fresh install's migration).

-- +goose Up
create table ledger.invoice_runs_from (
    one           boolean primary key default true check (one),
    recorded_from timestamptz not null
);
insert into ledger.invoice_runs_from (recorded_from) values (now());

-- +goose Down
drop table ledger.invoice_runs_from;
