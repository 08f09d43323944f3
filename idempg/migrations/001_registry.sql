-- idem registry, PostgreSQL. One row per idempotent operation; the unique
-- scope is the acceptance point. Times are database time (timestamptz).

CREATE TABLE idem_operations (
    scope           bytea       PRIMARY KEY CHECK (length(scope) = 32),
    operation_id    text        NOT NULL UNIQUE,
    operation       text        NOT NULL,
    owner           bytea       NOT NULL CHECK (length(owner) = 32),
    fingerprint     bytea       NOT NULL CHECK (length(fingerprint) = 32),
    contract        text        NOT NULL,
    state           text        NOT NULL CHECK (state IN ('RESERVED', 'EXECUTING', 'SUCCEEDED', 'FAILED_FINAL', 'UNKNOWN', 'REJECTED')),
    owner_gen       bigint      NOT NULL CHECK (owner_gen >= 1),
    writer_epoch    bigint      NOT NULL,
    lease_until     timestamptz NOT NULL,
    expires_at      timestamptz NOT NULL,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    resp_status     integer,
    resp_media_type text,
    resp_location   text,
    resp_etag       text,
    resp_body       bytea,
    resp_digest     bytea,
    -- A terminal record carries a complete response snapshot; no other does.
    -- (resp_digest IS NOT NULL keeps the right-hand side from being NULL,
    -- which would let a CHECK pass.)
    CONSTRAINT idem_operations_response CHECK (
        (state IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED')) =
        (resp_status IS NOT NULL AND resp_media_type IS NOT NULL AND resp_location IS NOT NULL
         AND resp_etag IS NOT NULL AND resp_body IS NOT NULL
         AND resp_digest IS NOT NULL AND length(resp_digest) = 32)
    ),
    CONSTRAINT idem_operations_response_absent CHECK (
        state IN ('SUCCEEDED', 'FAILED_FINAL', 'REJECTED') OR
        (resp_status IS NULL AND resp_body IS NULL AND resp_digest IS NULL)
    )
);

CREATE INDEX idem_operations_lease ON idem_operations (lease_until)
    WHERE state IN ('RESERVED', 'EXECUTING');
CREATE INDEX idem_operations_expires ON idem_operations (expires_at);

-- The legal transitions are those of idem.CanTransition (state.go); the
-- conformance suite checks that this trigger allows exactly those. Identity
-- columns never change and the owner generation never goes down.
CREATE FUNCTION idem_operations_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (OLD.state, NEW.state) NOT IN (
        ('RESERVED', 'RESERVED'), ('RESERVED', 'EXECUTING'), ('RESERVED', 'SUCCEEDED'),
        ('RESERVED', 'FAILED_FINAL'), ('RESERVED', 'REJECTED'),
        ('EXECUTING', 'EXECUTING'), ('EXECUTING', 'SUCCEEDED'), ('EXECUTING', 'FAILED_FINAL'),
        ('EXECUTING', 'UNKNOWN'),
        ('UNKNOWN', 'SUCCEEDED'), ('UNKNOWN', 'FAILED_FINAL')
    ) THEN
        RAISE EXCEPTION 'idem: illegal state transition % -> %', OLD.state, NEW.state
            USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.scope <> OLD.scope OR NEW.operation_id <> OLD.operation_id OR NEW.fingerprint <> OLD.fingerprint
       OR NEW.owner <> OLD.owner OR NEW.operation <> OLD.operation OR NEW.created_at <> OLD.created_at
       OR NEW.owner_gen < OLD.owner_gen THEN
        RAISE EXCEPTION 'idem: identity columns are immutable and owner_gen never decreases'
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER idem_operations_guard BEFORE UPDATE ON idem_operations
    FOR EACH ROW EXECUTE FUNCTION idem_operations_guard();

-- Transactional outbox: rows written in the business transaction.
CREATE TABLE idem_outbox (
    seq           bigserial   PRIMARY KEY,
    message_id    text        NOT NULL UNIQUE,
    operation_id  text        NOT NULL,
    topic         text        NOT NULL,
    payload       bytea       NOT NULL,
    created_at    timestamptz NOT NULL,
    claimed_until timestamptz,
    published_at  timestamptz
);

CREATE INDEX idem_outbox_pending ON idem_outbox (seq) WHERE published_at IS NULL;
