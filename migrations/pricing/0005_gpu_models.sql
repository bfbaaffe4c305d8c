-- +goose Up
-- Read model of the GPU catalogue (metering owns it; gpu_model.updated.*):
-- a rate card may price only a model named here. Seeded at start-up from the
-- same seed as metering's catalogue (version 0), so both agree before the
-- first event; a newer version replaces an older one, never the reverse.
create table pricing.gpu_models (
    gpu_model text primary key,
    aliases text[] not null default '{}',
    version bigint not null,
    updated_at timestamptz not null);

-- +goose Down
drop table pricing.gpu_models;
