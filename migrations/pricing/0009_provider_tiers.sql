-- +goose Up
-- Read model of the providers' commission tiers (metering owns the parties;
-- party.updated.*), as settlement keeps it (settlement.providers): a quote
-- naming a provider takes the commission of its tier on record, the one its
-- settlement takes. A newer version replaces an older one, never the
-- reverse; a provider not named here is quoted by the request's tier.
create table pricing.provider_tiers (
    provider_id text primary key,
    tier text not null,
    version bigint not null,
    updated_at timestamptz not null default now());

-- +goose Down
drop table pricing.provider_tiers;
