-- The rail a payout's current attempt is handed to, recorded by the gate
-- with submitting (before the attempt is submitted): only that rail is
-- asked about the attempt's reference. Asked of every rail in turn, one
-- rail hung (Alipay's gateway taking connections and never answering)
-- answered "outcome unknown" for every new bank and WeChat payout, which
-- were never submitted, each try waiting for Alipay's timeout.
--
-- '' for attempts marked before this (and by a replica of an earlier
-- version during a rolling upgrade): every rail is asked, as before.
--
-- The trigger: an update marking a payout submitting (false to true) that
-- does not set submit_rail itself gets '' (a replica of an earlier version
-- marking a retried attempt left the earlier attempt's rail, and a rail
-- asked alone that never had the reference answers "unknown": submitted
-- again on another rail). The gate clears it when it unmarks a payout.

-- +goose Up
alter table payout.payouts add column submit_rail text not null default '';
-- +goose StatementBegin
create function payout.clear_submit_rail() returns trigger language plpgsql as $$
begin
    if new.submit_rail is not distinct from old.submit_rail then
        new.submit_rail := '';
    end if;
    return new;
end
$$;
-- +goose StatementEnd
create trigger payouts_submit_rail before update of submitting on payout.payouts
    for each row when (new.submitting and not old.submitting) execute function payout.clear_submit_rail();

-- +goose Down
drop trigger payouts_submit_rail on payout.payouts;
drop function payout.clear_submit_rail();
alter table payout.payouts drop column submit_rail;
