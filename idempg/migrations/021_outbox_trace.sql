-- Trace context with outbox messages (docs/tracing.md): the W3C
-- traceparent of the span that recorded the message
-- (registry.Message.Trace), so that the relay's delivery continues that
-- trace and sends it on. NULL: none. It holds random trace and span IDs
-- only, never a key or a body, and is stored as it is. A traceparent is
-- 55 characters; the bound leaves room for later versions of the format.
ALTER TABLE idem_outbox ADD COLUMN trace_parent text NULL
    CONSTRAINT idem_outbox_trace_parent CHECK (trace_parent IS NULL OR length(trace_parent) <= 256);
