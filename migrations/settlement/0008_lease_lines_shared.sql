-- A credit naming a lease made a lease line of the provider it credited
-- whatever else its entry moved: finance's transfer from p-2's pending to
-- p-1's tagged with p-2's lease and renter (lease_id lease-2, renter_id
-- r-secret), or a goodwill credit from bank:operating so tagged, showed p-1
-- a line "lease-2, r-secret" (and the entry's GPU model and hours) that the
-- ledger withholds from p-1's read of the entry. The ledger now sums into a
-- lease line only a credit of a charge's shape (the provider's own accounts
-- and its renter's wallet).
--
-- Statements stored before leak still. Settlement cannot read the ledger, so
-- it cannot tell whose lease a stored line names; what it can see is a lease
-- named by the stored statements of two providers: a lease is one
-- provider's, so all but one of them name another's. Which one owns it is
-- the ledger's to know, so every such line, of every provider, loses its
-- lease, renter, GPU model and hours and keeps its amount and count ("N
-- charges"): the owner's line reads less than it did, and no line reads
-- another's lease. Missed: a lease of another's named by one provider's
-- statements only (its owner's charges folded into the remainder, or in no
-- stored statement yet); finance finds those entries in the ledger.

-- +goose Up
with shared as (
    select l->>'lease_id' as lease_id
    from settlement.settlements s cross join jsonb_array_elements(s.lines) l
    where coalesce(l->>'lease_id', '') <> ''
    group by 1
    having count(distinct s.provider_id) > 1)
update settlement.settlements s
set lines = (
    select jsonb_agg(case when l->>'lease_id' in (select lease_id from shared)
            then l - 'lease_id' - 'renter_id' - 'gpu_model' - 'gpu_hours'
            else l end order by n)
    from jsonb_array_elements(s.lines) with ordinality as e(l, n))
where exists (
    select 1 from jsonb_array_elements(s.lines) l
    where l->>'lease_id' in (select lease_id from shared));

-- +goose Down
-- Nothing to restore: which lease a line named is the ledger's.
