-- Payout settings finance and admin set through the API
-- (PATCH /v1/payout-settings) over the environment's defaults: one row per
-- setting set here ("minimums.CNY", "webhook_rotation_grace"), and every
-- change with who made it and why.

-- +goose Up
create table payout.settings (
    setting    text primary key,
    value      text not null,
    updated_at timestamptz not null,
    updated_by text not null);

create table payout.settings_history (
    seq       bigserial primary key,
    setting   text not null,
    old_value text,            -- null: it was not set here
    new_value text,            -- null: returned to the environment default
    actor     text not null,
    reason    text not null,
    at        timestamptz not null);

-- +goose Down
drop table payout.settings_history;
drop table payout.settings;
