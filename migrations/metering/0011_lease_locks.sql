-- An ingest serializes with every other ingest of the same leases by
-- locking one row per lease here (metering's LockLeases), in key order.
-- It took a transaction-scoped advisory lock per lease before: an entry of
-- Postgres's shared lock table each, sized for max_locks_per_transaction
-- (64) per connection of the whole cluster. Three concurrent calls of 5 000
-- events on as many leases filled it, and every service's next lock, and
-- every new connection, failed "out of shared memory" until they ended. A
-- row lock lives in the row, not in that table.
--
-- A row is written the first time a lease is locked; leases recorded before
-- this migration get theirs then.

-- +goose Up
create table metering.lease_locks (
    lease_id text collate "C" primary key);

-- +goose Down
drop table metering.lease_locks;
