-- When finance rejected a provider's KYC: the first save of the rejection,
-- kept while the KYC stays rejected (finance re-saving the same verdict,
-- its reference amended, is no new rejection). The age of a bank transfer
-- a rejected KYC keeps queued (gpubill_payout_kyc_rejected_queued_age_seconds)
-- counted from updated_at, the last save: a rejection re-saved daily never
-- reached GpubillPayoutKYCRejectedTransferQueued's day. Set exactly while
-- rejected. A row rejected before this counts from its last save (all
-- that is known of it).
--
-- The trigger: a replica of the version before this one, still serving
-- during a rolling upgrade, writes a KYC without rejected_at, and each of
-- its writes of a rejection (finance stopping a provider), of a rejected
-- provider verified again, or of a first KYC that is a rejection failed
-- the check (a 500; the stop never happened). Before each insert or update
-- it sets rejected_at: kept while the KYC was and stays rejected, the
-- save's own (or else updated_at, the save's time) on the first move to
-- rejected, cleared otherwise. This version's PutKYC writes the same.

-- +goose Up
alter table payout.kyc add column rejected_at timestamptz;
update payout.kyc set rejected_at = updated_at where status = 'rejected';
-- +goose StatementBegin
create function payout.kyc_set_rejected_at() returns trigger language plpgsql as $$
begin
    if new.status <> 'rejected' then
        new.rejected_at := null;
    elsif tg_op = 'UPDATE' and old.status = 'rejected' and old.rejected_at is not null then
        new.rejected_at := old.rejected_at;
    else
        new.rejected_at := coalesce(new.rejected_at, new.updated_at, now());
    end if;
    return new;
end
$$;
-- +goose StatementEnd
create trigger kyc_rejected_at before insert or update on payout.kyc
    for each row execute function payout.kyc_set_rejected_at();
alter table payout.kyc add constraint kyc_rejected_at check ((status = 'rejected') = (rejected_at is not null));

-- +goose Down
drop trigger kyc_rejected_at on payout.kyc;
drop function payout.kyc_set_rejected_at();
alter table payout.kyc drop constraint kyc_rejected_at;
alter table payout.kyc drop column rejected_at;
