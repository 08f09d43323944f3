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
		&d.SynchronousCommit, &d.SynchronousStandbyNames, &d.Standbys, &d.Synchronous, &d.Unseen)
	if err != nil {
		return Durability{}, fmt.Errorf("idempg: durability: %w", translate(err))
	}
	return d, nil
}

// Warnings returns what in d can lose an acknowledged outcome, one
// sentence each; none when nothing can be seen to: a commit that is not
// flushed before it is acknowledged (synchronous_commit off or local),
// or standbys that stream asynchronously while none is synchronous — a
// failover to one loses the commits it had not received. A server with
// no standby at all gets no warning: whether it has a failover target
// elsewhere (an archive, storage replication) cannot be seen from here.
func (d Durability) Warnings() []string {
	var w []string
	switch d.SynchronousCommit {
	case "off", "local":
		w = append(w, fmt.Sprintf("synchronous_commit is %q: an acknowledged outcome can be lost when the primary crashes or fails over (set it to on: docs/operations.md, \"High availability\")", d.SynchronousCommit))
	}
	if d.Standbys > 0 && d.Synchronous == 0 {
		w = append(w, fmt.Sprintf("%d standby(s) stream asynchronously and none synchronously (synchronous_standby_names %q): a failover to one can lose acknowledged outcomes, and a retry then executes again (docs/operations.md, \"High availability\")", d.Standbys, d.SynchronousStandbyNames))
	}
	return w
}
