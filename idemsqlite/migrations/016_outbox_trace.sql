-- Trace context with outbox messages (docs/tracing.md): the W3C
-- traceparent of the span that recorded the message
-- (registry.Message.Trace), so that the relay's delivery continues that
-- trace and sends it on. NULL: none. The same rules as idempg's
-- migration 021. (ADD COLUMN with a CHECK is allowed: the existing rows
-- are NULL, which passes.)
ALTER TABLE idem_outbox ADD COLUMN trace_parent TEXT NULL
    CONSTRAINT idem_outbox_trace_parent CHECK (trace_parent IS NULL OR length(trace_parent) <= 256);
