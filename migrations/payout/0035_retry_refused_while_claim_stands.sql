-- A payout failed again while a claim of its settlement outside stands
-- (payout.settled_outside: paid in part by hand, another of its entries
-- reversed) cannot be retried: a retry paid its whole net again (the
-- service's Retry refuses it). A replica of a version before that rule,
-- still serving during a rolling upgrade, moved it failed (or returned)
-- to created all the same. The trigger refuses that move while a claim
-- stands, with SQLSTATE GBP01 (the store answers it a failed precondition;
-- the earlier version, which does not know it, a 500: the retry refused).
-- Nothing else moves a failed or returned payout to created.

-- +goose Up
-- +goose StatementBegin
create function payout.refuse_retry_claim_stands() returns trigger language plpgsql as $$
declare
    tx text;
begin
    select string_agg(transaction_id, ', ' order by transaction_id) into tx
        from payout.settled_outside where payout_id = new.payout_id;
    if tx is not null then
        raise exception 'payout % is still paid in part by hand by ledger transaction %: settle it outside again naming it with entries for the rest, or reverse it, before a retry',
            new.payout_id, tx using errcode = 'GBP01';
    end if;
    return new;
end
$$;
-- +goose StatementEnd
create trigger payouts_retry_claim_stands before update of status on payout.payouts
    for each row when (old.status in ('failed', 'returned') and new.status = 'created')
    execute function payout.refuse_retry_claim_stands();

-- +goose Down
drop trigger payouts_retry_claim_stands on payout.payouts;
drop function payout.refuse_retry_claim_stands();
