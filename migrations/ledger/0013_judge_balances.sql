-- A group of API writes posted in one round trip (the ledger's PostNew)
-- ends with a statement that looks at the balances its negative changes
-- reached, before its COMMIT: ledger.needs_judging raises LG001 when one is
-- where the ledger's rules must judge it (an overdraft, a renter wallet at
-- or below zero), so the transaction aborts and the write is posted again
-- the way that judges it in Go.

-- +goose Up
-- +goose StatementBegin
create function ledger.needs_judging(account text, currency text) returns void language plpgsql as $$
begin
    raise exception 'balance % % must be judged before commit', account, currency
        using errcode = 'LG001';
end;
$$;
-- +goose StatementEnd

-- +goose Down
drop function ledger.needs_judging(text, text);
