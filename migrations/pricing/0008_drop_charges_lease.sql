-- charges_lease (lease_id) served no query: the per-lease rounding state is
-- pricing.lease_totals, and listing charges goes by renter (charges_renter,
-- which a lease filter narrows). Rating paid one more btree insert per
-- charge for it: a third of the COPY's index work.

-- +goose Up
drop index if exists pricing.charges_lease;

-- +goose Down
create index charges_lease on pricing.charges (lease_id);
