-- +goose Up
-- The one GPU catalogue (metering owns it; GET/POST /v1/gpu-models). The
-- seed (pkg/gpucatalog) is upserted at start-up into rows still at version 0
-- (never written through the API); every version is published as
-- gpu_model.updated.{gpu_model}: published_version < version marks a version
-- still to be put in the outbox (the seed's, at the next start). Models are
-- never deleted: a rate card that priced one keeps its usage billable.
alter table metering.gpu_models
    add column display_name text not null default '',
    add column aliases text[] not null default '{}',
    add column version bigint not null default 0,
    add column published_version bigint not null default 0,
    add column updated_at timestamptz not null default now();

-- +goose Down
alter table metering.gpu_models drop column display_name, drop column aliases, drop column version,
    drop column published_version, drop column updated_at;
