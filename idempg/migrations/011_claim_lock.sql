-- The claim first, in one transaction (Store.ExecuteOnce). Before the
-- business function's first statement runs, its transaction calls
-- idem_claim: a transaction-scoped advisory lock named after the scope,
-- then a look for the scope's record. A concurrent duplicate (another
-- process, the same key) therefore waits for the first transaction to
-- end instead of running its business statements; when the first
-- committed, idem_claim raises IDM02 and the duplicate's statements never
-- run — its transaction is aborted and the driver returns the committed
-- record's verdict. Nothing is written: the lock lives in memory, no WAL.
--
-- The lock is a helper, not the acceptance point: the record's insert at
-- commit (InsertOutcome, its unique scope) still decides. Two scopes that
-- share the lock's 32 bits only wait for each other; a writer that does
-- not call idem_claim (an older binary, the two-phase style) is still
-- refused by the unique scope at its insert. Under REPEATABLE READ or
-- SERIALIZABLE the look below cannot see a record committed while it
-- waited (its snapshot is older), so the duplicate runs its statements
-- and the insert refuses them, as before this migration.
--
-- The two-integer advisory lock space is separate from the one-bigint
-- space; the class 1768187245 is "idem" in ASCII, so other users of
-- two-integer advisory locks only collide if they chose the same class.
-- Transaction-scoped, it works behind a pooler in transaction mode.
CREATE FUNCTION idem_claim(p_scope bytea, p_lock integer) RETURNS void LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(1768187245, p_lock);
    -- A VOLATILE function's statements each take a new snapshot under
    -- READ COMMITTED: this one sees a record committed while the lock
    -- was awaited.
    IF EXISTS (SELECT 1 FROM idem_operations WHERE scope = p_scope) THEN
        RAISE EXCEPTION 'idem: the scope was recorded by another transaction'
            USING ERRCODE = 'IDM02';
    END IF;
END
$$;
