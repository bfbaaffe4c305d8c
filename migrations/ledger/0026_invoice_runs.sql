-- Months whose invoice run completed (IssueMonth went through every wallet
-- that moved in the month without an error; a month where none moved
-- completes with nothing issued). What GpubillInvoicesNotIssued reads: a
-- month whose run never happened (a restore onto a new Temporal, before
-- settlement backfilled its new schedules) was told by nothing, invoices
-- being made only for wallets that moved. A month is recorded once, at
-- its first complete run.

-- +goose Up
create table ledger.invoice_runs (
    period       text primary key,
    time_zone    text not null,
    period_start timestamptz not null,
    period_end   timestamptz not null,
    completed_at timestamptz not null,
    issued       int not null
);

-- The latest month invoiced before runs were recorded: the months before it
-- are not asked for (those that had no invoice may have had nothing to
-- issue), those after it are.
insert into ledger.invoice_runs (period, time_zone, period_start, period_end, completed_at, issued)
select period, time_zone, period_start, period_end, max(issued_at), count(*)::int from ledger.invoices
where period = (select max(period) from ledger.invoices)
group by period, time_zone, period_start, period_end
order by max(issued_at) desc
limit 1;

-- +goose Down
drop table ledger.invoice_runs;
