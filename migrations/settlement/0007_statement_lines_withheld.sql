-- A statement line of one ledger entry (no lease, a transaction id) carried
-- the entry's description and renter_id as the ledger stored them, also for
-- an entry that moves another party's accounts: finance's transfer from
-- p-2's pending to p-1's, "dispute: renter r-secret of p-2 …" with renter_id
-- r-secret, reached both providers' statements, while the ledger withholds
-- that text from both (GET /v1/transactions/{id}). The ledger now withholds
-- it from the lines too, and settlement labels such a line "adjustment".
-- Statements stored before leak still: settlement cannot tell here which
-- entries were the provider's alone (that is the ledger's to judge), so every
-- such line of a stored statement becomes an "adjustment" with no renter.
-- The text is not lost: finance reads it in the ledger, and so does the
-- provider where the entry is wholly its own. Lease lines ("N charges",
-- their own renter) and the folded remainder (no transaction id) stay.

-- +goose Up
update settlement.settlements s
set lines = (
    select jsonb_agg(case when coalesce(l->>'lease_id', '') = '' and coalesce(l->>'transaction_id', '') <> ''
            then (l - 'renter_id') || '{"description": "adjustment"}'::jsonb
            else l end order by n)
    from jsonb_array_elements(s.lines) with ordinality as e(l, n))
where exists (
    select 1 from jsonb_array_elements(s.lines) l
    where coalesce(l->>'lease_id', '') = '' and coalesce(l->>'transaction_id', '') <> ''
        and (l ? 'renter_id' or l->>'description' is distinct from 'adjustment'));

-- +goose Down
-- Nothing to restore: the text withheld is the ledger's.
