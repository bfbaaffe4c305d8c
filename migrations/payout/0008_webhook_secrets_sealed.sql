-- Webhook secrets are kept sealed (AES-256-GCM, adapters.SecretBox), never
-- in plaintext: secret_sealed is the current secret, previous_secret_sealed
-- the one a rotation replaced, still signing deliveries (beside the new
-- one) until previous_secret_until. secret_key_id names the key that
-- sealed them. Rows made before this migration keep their plaintext in
-- secret until the service's next start seals it and clears the column.

-- +goose Up
alter table payout.webhooks
    alter column secret drop not null,
    add column secret_sealed bytea,
    add column secret_key_id text,
    add column secret_rotated_at timestamptz,
    add column previous_secret_sealed bytea,
    add column previous_secret_until timestamptz,
    add constraint webhooks_secret_sealed_or_legacy check ((secret is null) <> (secret_sealed is null)),
    add constraint webhooks_previous_secret check ((previous_secret_sealed is null) = (previous_secret_until is null));

-- +goose Down
alter table payout.webhooks
    drop constraint webhooks_previous_secret,
    drop constraint webhooks_secret_sealed_or_legacy,
    drop column previous_secret_until,
    drop column previous_secret_sealed,
    drop column secret_rotated_at,
    drop column secret_key_id,
    drop column secret_sealed,
    alter column secret set not null;
