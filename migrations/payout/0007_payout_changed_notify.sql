-- Every change to what GET /v1/payouts/{id} answers (the payout row, its
-- status history, the statements it pays) notifies channel payout_changed
-- with the payout's id, after commit. Each payout process listens and drops
-- its cached copy (adapters.PayoutCache), so polls are served from memory
-- and a write by any process is seen by all.

-- +goose Up
-- +goose StatementBegin
create function payout.notify_payout_changed() returns trigger language plpgsql as $$
begin
    if tg_op = 'DELETE' then
        perform pg_notify('payout_changed', old.payout_id);
    else
        perform pg_notify('payout_changed', new.payout_id);
        if tg_op = 'UPDATE' and old.payout_id <> new.payout_id then
            perform pg_notify('payout_changed', old.payout_id);
        end if;
    end if;
    return null;
end
$$;
-- +goose StatementEnd
create trigger payouts_changed after update or delete on payout.payouts
    for each row execute function payout.notify_payout_changed();
create trigger status_history_changed after insert or update or delete on payout.status_history
    for each row execute function payout.notify_payout_changed();
create trigger payout_statements_changed after insert or update or delete on payout.payout_statements
    for each row execute function payout.notify_payout_changed();

-- +goose Down
drop trigger payout_statements_changed on payout.payout_statements;
drop trigger status_history_changed on payout.status_history;
drop trigger payouts_changed on payout.payouts;
drop function payout.notify_payout_changed();
