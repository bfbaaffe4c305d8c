-- The remittance runs' lock (a session advisory lock, Store.LockRuns) lives
-- on one database session: that session lost mid-run (its connection killed,
-- idle_session_timeout, the network) let another replica's run take the lock
-- while the first went on writing, and both filed the month. Each taking of
-- the lock now draws the next token of this one row, and every write of a
-- run checks, in its own transaction and under a share lock of the row, that
-- its token is still the latest: a run that lost the lock writes nothing
-- after the next run has taken it.

-- +goose Up
create table tax.remittance_run_fence (
    only_row boolean primary key default true check (only_row),
    token bigint not null);
insert into tax.remittance_run_fence (token) values (0);

-- +goose Down
drop table tax.remittance_run_fence;
