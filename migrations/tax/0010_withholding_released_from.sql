-- A month's remittance is filed once. A re-run of a filed month made a new
-- remittance of it (rem-2026-02-US-CNY) from withholdings whose settlements
-- were posted after its filing, and a remittance reversed in the ledger was
-- paid again together with such withholdings: late tax remitted under a
-- month already filed. A filed month (its run recorded, or any remittance of
-- it made) now takes only the withholdings a reversed remittance of it gave
-- back; every other goes with the first month filed after the ledger posts
-- it. released_from is the reversed remittance a withholding was given back
-- by (kept once it is remitted again: the history a reversal left).

-- +goose Up
alter table tax.withholdings add column released_from text;

-- +goose Down
alter table tax.withholdings drop column released_from;
