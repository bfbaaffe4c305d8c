-- A payout marked submitting gets its submitting_since whatever marks it.
-- SetSubmitting sets it; the gate's Move (a payout that waited at the gate:
-- action_required to created) did not, nor did a replica of a version
-- before 0014 during a rolling upgrade, and one marked again after a retry
-- or a return to the gate kept its earlier attempt's time. min() skipped
-- the NULLs: gpubill_payout_submitting_age_seconds read 0, and
-- GpubillPayoutSubmissionStuck never fired, for the payouts stuck longest.
--
-- The trigger: an update marking a payout submitting (false to true) that
-- does not set submitting_since itself gets now() (SetSubmitting's time).
-- It does not clear it when submitting goes back to false (no code does).
--
-- The backfill: a created payout marked submitting with no time, or with
-- one before its last change (an earlier attempt's), gets updated_at: its
-- last change before the gate (its status history's latest entry; nothing
-- changes a submitting created payout's updated_at), the earliest the gate
-- can have passed it, so its age reads at least what it is. Payouts past
-- created are not read by the gauge, and their updated_at is after the gate.

-- +goose Up
-- +goose StatementBegin
create function payout.set_submitting_since() returns trigger language plpgsql as $$
begin
    if new.submitting_since is not distinct from old.submitting_since then
        new.submitting_since := now();
    end if;
    return new;
end
$$;
-- +goose StatementEnd
create trigger payouts_submitting_since before update of submitting on payout.payouts
    for each row when (new.submitting and not old.submitting) execute function payout.set_submitting_since();
update payout.payouts set submitting_since = updated_at
    where status = 'created' and submitting and (submitting_since is null or submitting_since < updated_at);

-- +goose Down
drop trigger payouts_submitting_since on payout.payouts;
drop function payout.set_submitting_since();
