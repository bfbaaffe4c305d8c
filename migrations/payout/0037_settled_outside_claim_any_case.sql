-- A claim (payout.settled_outside) names a ledger transaction, which the
-- ledger reads in any letter case (a UUID, kept and answered in lower
-- case). transaction_id was unique as typed: one hand payment typed once in
-- lower and once in upper case settled two payouts (one of them unpaid,
-- read paid), or was counted twice towards one net. A claim is now unique
-- on lower(transaction_id); the service stores ids in lower case.
--
-- Claims made before this migration that name one entry in two cases
-- cannot all stand under that key, and deleting one would hide a payout
-- read paid that may not be: the earliest claim of each entry (by
-- settled_at, then payout_id) keeps the key; each later one stays a claim
-- (the payout keeps its status, :retry stays refused, the settled-outside
-- check and the reversal consumer still read it) and is marked with the
-- payout holding the earliest: case_duplicate_of. Finance reviews each one
-- (its payout was settled by an entry that also pays another, or twice
-- towards its own net), e.g. reverses the entry and settles again:
--   select payout_id, transaction_id, case_duplicate_of, settled_at
--     from payout.settled_outside where case_duplicate_of is not null;
-- The table is locked for the update and the index (add column takes an
-- access exclusive lock first), so no claim commits in between.

-- +goose Up
alter table payout.settled_outside add column case_duplicate_of text;
update payout.settled_outside s set case_duplicate_of = f.first_payout
    from (select payout_id, transaction_id,
                 first_value(payout_id) over w as first_payout,
                 row_number() over w as n
            from payout.settled_outside
          window w as (partition by lower(transaction_id) order by settled_at, payout_id, transaction_id)) f
    where f.payout_id = s.payout_id and f.transaction_id = s.transaction_id and f.n > 1;
create unique index settled_outside_claim_any_case on payout.settled_outside (lower(transaction_id))
    where case_duplicate_of is null;

-- +goose Down
drop index payout.settled_outside_claim_any_case;
alter table payout.settled_outside drop column case_duplicate_of;
