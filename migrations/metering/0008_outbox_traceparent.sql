-- The W3C traceparent of the span that wrote an outbox row (pkg/outbox):
-- the relay publishes the message in that trace and carries it on in the
-- NATS headers. Null when tracing is off and no caller sent a trace.

-- +goose Up
alter table metering.outbox add column traceparent text;

-- +goose Down
alter table metering.outbox drop column traceparent;
