-- gpubill_ledger_closed_renter_wallets counts, on every scrape, the closed
-- renters whose wallet is off zero (a reversal put money back in it, or a
-- debt not written off): this partial index lists the closed renters
-- without reading the open ones, each wallet's balance then read by its
-- key. A renter's closed_at is set once (a close is final) and open
-- renters are not in it, so it costs party.updated's writes little. Built concurrently;
-- an index a failed build left invalid is dropped first (if not exists
-- would keep it). Earlier replicas neither read nor mind it.

-- +goose NO TRANSACTION
-- +goose Up
drop index concurrently if exists ledger.renters_closed_idx;
create index concurrently renters_closed_idx on ledger.renters (renter_id) where closed_at is not null;

-- +goose Down
drop index concurrently if exists ledger.renters_closed_idx;
