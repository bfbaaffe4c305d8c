-- A charge's lines live in the charge row (jsonb array, in line order) instead
-- of a table of their own: rating wrote two rows and two btree entries per
-- charge, the second only ever read back with its charge. Each element is
-- {"kind","gpu_model","gpu_count","band","tier","rate_card_id","start_time",
-- "end_time","gpu_hours","unit_price","multiplier","amount"}, decimals as
-- exact strings. Existing lines are moved over, in line_no order.

-- +goose Up
alter table pricing.charges add column lines jsonb not null default '[]';

update pricing.charges c set lines = l.lines
from (select charge_id, jsonb_agg(jsonb_build_object(
        'kind', kind, 'gpu_model', gpu_model, 'gpu_count', gpu_count, 'band', band, 'tier', tier,
        'rate_card_id', rate_card_id,
        'start_time', to_char(start_time at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'end_time', to_char(end_time at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'gpu_hours', gpu_hours::text, 'unit_price', unit_price::text,
        'multiplier', multiplier::text, 'amount', amount::text) order by line_no) as lines
      from pricing.charge_lines group by charge_id) l
where l.charge_id = c.charge_id;

drop table pricing.charge_lines;
