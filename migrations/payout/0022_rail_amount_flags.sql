-- What a rail held under a payout's reference when the payout was flagged
-- rail_amount_mismatch (made again after a restore or a recovery at
-- another net than the rail was sent), and finance's resolution. Such a
-- payout stayed submitted for ever, its net in in_transit, its workflow
-- polling the rail: no operation closed it. POST
-- /v1/payouts/{payout_id}:resolve-amount-mismatch records it paid at its
-- net once finance confirms the rail's amount kept here (compared with the
-- rail's bill); the difference is booked by hand. One row per payout
-- attempt, kept with who resolved it and why.
--
-- The backfill: a payout flagged before this version has the rail's amount
-- only in its failure_message ("<rail> holds <ref> at <amount> <CUR>, the
-- payout is ..."), read back here.

-- +goose Up
create table payout.rail_amount_flags (
    payout_id text not null references payout.payouts (payout_id),
    attempt int not null,
    rail text not null,
    rail_amount numeric not null,
    rail_currency text not null,
    flagged_at timestamptz not null,
    resolved_by text not null default '',
    resolution_reason text not null default '',
    resolved_at timestamptz,
    primary key (payout_id, attempt),
    check ((resolved_at is null) = (resolution_reason = '')));

insert into payout.rail_amount_flags (payout_id, attempt, rail, rail_amount, rail_currency, flagged_at)
select payout_id, attempt, m[1], replace(m[2], ',', '')::numeric, m[3], updated_at
from (select payout_id, attempt, updated_at,
        regexp_match(failure_message, '^(\S+) holds .* at (-?[0-9][0-9,]*(?:\.[0-9]+)?) ([A-Z]{3}), the payout is ') as m
    from payout.payouts where failure_code = 'rail_amount_mismatch') f
where m is not null;

-- +goose Down
drop table payout.rail_amount_flags;
