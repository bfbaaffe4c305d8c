-- Months whose remittance run completed (RemitTax planned the month and
-- posted every remittance it answered; a month where nothing was owed
-- completes with none). What GpubillTaxMonthNotRemitted reads: a month
-- whose run never happened (Temporal lost over the 1st, the schedule
-- paused, the run failing) was told only by GpubillTaxNotRemitted at 33
-- days of a withholding's age, after the month's filing deadline, and not
-- at all when its withholdings' settlements were not posted. A month is
-- recorded once, at its first complete run.

-- +goose Up
create table tax.remittance_runs (
    period       text primary key,
    completed_at timestamptz not null,
    remittances  int not null,
    not_posted   int not null
);

-- When months began to be recorded: the months that ended before it are
-- not asked for (nothing says whether their run completed; an upgrade does
-- not alarm for them, GpubillTaxNotRemitted still reads their
-- withholdings), every month that ends after it is. One row.
create table tax.remittance_runs_from (
    one           boolean primary key default true check (one),
    recorded_from timestamptz not null
);
insert into tax.remittance_runs_from (recorded_from) values (now());

-- +goose Down
drop table tax.remittance_runs_from;
drop table tax.remittance_runs;
