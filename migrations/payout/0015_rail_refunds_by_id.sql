-- +goose Up
-- WeChat Pay notifies each refund on its own (REFUND.SUCCESS), under its
-- refund_id and with that refund's amount, not the payment's refunded
-- total: such a refund is kept once per refund_id, its row's
-- refunded_total being the payment's total with it (the highest before
-- plus its amount), and content_digest a digest of its notified fields, so
-- the rail's retry of it (the same id and content) is told apart from
-- other content under its id. Both are null on Alipay's rows, one per rise
-- of the total Alipay notifies.
alter table payout.rail_refunds
    add column refund_id text,
    add column content_digest text,
    add constraint rail_refunds_refund_id unique (rail, refund_id),
    add constraint rail_refunds_refund_id_digest check ((refund_id is null) = (content_digest is null));

-- +goose Down
alter table payout.rail_refunds
    drop constraint rail_refunds_refund_id_digest,
    drop constraint rail_refunds_refund_id,
    drop column content_digest,
    drop column refund_id;
