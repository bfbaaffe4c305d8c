-- When finance rejected a provider's KYC: the first save of the rejection,
-- kept while the KYC stays rejected (finance re-saving the same verdict,
-- its reference amended, is no new rejection). The age of a bank transfer
-- a rejected KYC keeps queued (gpubill_payout_kyc_rejected_queued_age_seconds)
-- counted from updated_at, the last save: a rejection re-saved daily never
-- reached GpubillPayoutKYCRejectedTransferQueued's day. Set exactly while
-- rejected. A row rejected before this counts from its last save (all
-- that is known of it).

-- +goose Up
alter table payout.kyc add column rejected_at timestamptz;
update payout.kyc set rejected_at = updated_at where status = 'rejected';
alter table payout.kyc add constraint kyc_rejected_at check ((status = 'rejected') = (rejected_at is not null));

-- +goose Down
alter table payout.kyc drop constraint kyc_rejected_at;
alter table payout.kyc drop column rejected_at;
