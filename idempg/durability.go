package idempg

import (
	"context"
	"embed"
	"fmt"

	"github.com/idemkit/idem/internal/sqlfile"
)

//go:embed durability.sql
var durabilityFS embed.FS

// durabilityQueries holds the named statements of durability.sql.
var durabilityQueries = sqlfile.MustLoad(durabilityFS, "durability.sql")

// Durability describes what survives the primary's loss: the settings an
// acknowledged outcome's commit runs under and the standbys streaming
// from the server the Store reaches.
type Durability struct {
	// SynchronousCommit is the session's synchronous_commit: the setting
	// of the database, role or server (idem raises it only for effect
	// intents and lowers it only for two-phase reservations).
	SynchronousCommit string
	// StatementTimeout is the session's statement_timeout ("0": none).
	StatementTimeout string
	// SynchronousStandbyNames is the server's synchronous_standby_names.
	SynchronousStandbyNames string
	// Standbys counts the standbys streaming from the server whose state
	// the Store's role may read; Synchronous those that are synchronous
	// (sync or quorum); Unseen those whose state it may not read.
	Standbys, Synchronous, Unseen int
}

// Durability reads the settings and standbys. ctx governs the query.
func (s *Store) Durability(ctx context.Context) (Durability, error) {
	var d Durability
	err := s.pool.QueryRow(ctx, durabilityQueries.Get("Durability")).Scan(
		&d.SynchronousCommit, &d.StatementTimeout, &d.SynchronousStandbyNames, &d.Standbys, &d.Synchronous, &d.Unseen)
	if err != nil {
		return Durability{}, fmt.Errorf("idempg: durability: %w", translate(err))
	}
	return d, nil
}

// Warnings returns what in d can lose an acknowledged outcome, one
// sentence each; none when nothing can be seen to: a commit that is not
// flushed before it is acknowledged (synchronous_commit off or local),
// standbys that stream asynchronously while none is synchronous — a
// failover to one loses the commits it had not received — or a
// statement_timeout where commits wait for a synchronous standby (the
// timeout ends the wait and the commit is reported as done). A server with
// no standby at all gets no warning: whether it has a failover target
// elsewhere (an archive, storage replication) cannot be seen from here.
func (d Durability) Warnings() []string {
	var w []string
	switch d.SynchronousCommit {
	case "off", "local":
		w = append(w, fmt.Sprintf("synchronous_commit is %q: an acknowledged outcome can be lost when the primary crashes or fails over (set it to on: docs/operations.md, \"High availability\")", d.SynchronousCommit))
	}
	if d.StatementTimeout != "" && d.StatementTimeout != "0" && (d.Synchronous > 0 || d.SynchronousStandbyNames != "") {
		w = append(w, fmt.Sprintf("statement_timeout is %s with synchronous standbys: a timeout that fires while a COMMIT waits for the standby makes PostgreSQL report the commit as done although the standby may not have it, and a failover then loses an acknowledged outcome (set statement_timeout to 0 for idem's role: docs/operations.md, \"High availability\")", d.StatementTimeout))
	}
	if d.Standbys > 0 && d.Synchronous == 0 {
		w = append(w, fmt.Sprintf("%d standby(s) stream asynchronously and none synchronously (synchronous_standby_names %q): a failover to one can lose acknowledged outcomes, and a retry then executes again (docs/operations.md, \"High availability\")", d.Standbys, d.SynchronousStandbyNames))
	}
	return w
}
