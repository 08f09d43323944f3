-- The PostgreSQL server behind the run, for measuring its CPU and pinning
-- it (cpu.go, pin.go): the process ID of this connection's backend, whose
-- parent is the postmaster.

-- name: backend_pid
SELECT pg_backend_pid()
