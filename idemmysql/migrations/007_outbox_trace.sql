-- Trace context with outbox messages (docs/tracing.md): the W3C
-- traceparent of the span that recorded the message
-- (registry.Message.Trace), so that the relay's delivery continues that
-- trace and sends it on. NULL: none. Rule for rule what idempg's
-- migration 021 and idemsqlite's 016 hold.
ALTER TABLE idem_outbox ADD COLUMN trace_parent VARCHAR(256) CHARACTER SET ascii COLLATE ascii_bin NULL;
