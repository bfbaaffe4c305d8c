-- The house's own money into the client pool, by finance: funding a
-- client-money shortfall (Dr bank:client, Cr bank:operating) and writing
-- off a renter's debt to platform:expense:bad_debt (an expense account, the
-- chart's first). Each has a transaction kind of its own: the segregation
-- rule sanctions them by it, which no entry posted before could carry.

-- +goose Up
alter table ledger.accounts drop constraint accounts_kind_check,
    add constraint accounts_kind_check check (kind in ('asset', 'liability', 'income', 'expense'));
alter table ledger.transactions drop constraint transactions_kind_check,
    add constraint transactions_kind_check check (kind in ('manual', 'deposit', 'charge', 'reversal',
        'client_money_funding', 'bad_debt_write_off'));
-- The report reads their house-pool postings (they are not commission).
create index transactions_house_funding_idx on ledger.transactions (created_at)
    where kind in ('client_money_funding', 'bad_debt_write_off');

-- +goose Down
drop index ledger.transactions_house_funding_idx;
alter table ledger.transactions drop constraint transactions_kind_check,
    add constraint transactions_kind_check check (kind in ('manual', 'deposit', 'charge', 'reversal'));
alter table ledger.accounts drop constraint accounts_kind_check,
    add constraint accounts_kind_check check (kind in ('asset', 'liability', 'income'));
