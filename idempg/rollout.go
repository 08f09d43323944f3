package idempg

import (
	"cmp"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/sqlfile"
	"github.com/idemkit/idem/registry"
)

//go:embed rollout.sql
var rolloutFS embed.FS

// rolloutQueries are the named queries of the rollouts and their verdict
// counts (rollout.sql).
var rolloutQueries = sqlfile.MustLoad(rolloutFS, "rollout.sql")

var _ registry.RolloutStore = (*Store)(nil)

// Rollouts returns every operation's rollout row, ordered by operation;
// see registry.RolloutStore. ctx governs the query.
func (s *Store) Rollouts(ctx context.Context) ([]registry.Rollout, error) {
	rows, err := s.pool.Query(ctx, rolloutQueries.Get("Rollouts"))
	if err != nil {
		return nil, fmt.Errorf("idempg: rollouts: %w", translate(err))
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (registry.Rollout, error) { return scanRollout(row) })
	if err != nil {
		return nil, fmt.Errorf("idempg: rollouts: %w", translate(err))
	}
	return list, nil
}

// Rollout returns the operation's row, or Rollout{Operation: operation}
// when it has none; see registry.RolloutStore. ctx governs the query.
func (s *Store) Rollout(ctx context.Context, operation string) (registry.Rollout, error) {
	r, err := readRollout(ctx, s.pool, "Rollout", operation)
	if err != nil {
		return registry.Rollout{}, fmt.Errorf("idempg: rollout: %w", translate(err))
	}
	return r, nil
}

// SetRollout applies c in one transaction: it reads the row FOR UPDATE,
// checks c.Seen and the force rule (registry.CheckRolloutChange), writes
// the row with a compare-and-set on the version (an insert that does
// nothing when a row appeared meanwhile, for Seen 0) and appends the
// audit entry; see registry.RolloutStore. The COMMIT is waited for
// whatever ctx does (commit.go); ctx governs the rest.
func (s *Store) SetRollout(ctx context.Context, c registry.RolloutChange) (registry.Rollout, error) {
	if err := c.Validate(); err != nil {
		return registry.Rollout{}, fmt.Errorf("idempg: %w", err)
	}
	allow, deny, err := tenantLists(c.Allow, c.Deny)
	if err != nil {
		return registry.Rollout{}, fmt.Errorf("idempg: set rollout: %w", err)
	}
	now, _ := s.clock()
	var out registry.Rollout
	err = inTx(ctx, s.pool, func(tx pgx.Tx) error {
		old, err := readRollout(ctx, tx, "RolloutForUpdate", c.Operation)
		if err != nil {
			return err
		}
		if err := registry.CheckRolloutChange(old, c); err != nil {
			return err
		}
		entry := registry.RolloutAudit(old, c)
		if err := entry.Validate(); err != nil {
			return err
		}
		out = c.Result(old)
		query := "RolloutUpdate"
		if c.Seen == 0 {
			query = "RolloutInsert"
		}
		var enforcedAt *time.Time
		err = tx.QueryRow(ctx, rolloutQueries.Get(query), now, c.Operation, c.Mode, c.Percent,
			c.ByPrincipal, allow, deny, out.Forced, out.Enforcing(), c.Actor, c.Seen).
			Scan(&enforcedAt, &out.Version, &out.UpdatedAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: %s changed meanwhile", registry.ErrRolloutStale, c.Operation)
		}
		if err != nil {
			return err
		}
		out.UpdatedAt = out.UpdatedAt.UTC()
		if enforcedAt != nil {
			out.EnforcedAt = enforcedAt.UTC()
		}
		var (
			seq int64
			at  time.Time
		)
		return tx.QueryRow(ctx, auditQueries.Get("AppendAudit"), entry.Actor, entry.Action, nil, entry.Detail, now).Scan(&seq, &at)
	})
	if err != nil {
		return registry.Rollout{}, fmt.Errorf("idempg: set rollout: %w", translate(err))
	}
	return out, nil
}

// MarkEnforced sets the operation's EnforcedAt if unset, creating its row
// (Mode "") if there is none, in one upsert, and returns the row; see
// registry.RolloutStore. A row an operator set off without force is left
// as it is (no instance that follows it enforces the operation): the
// returned row says so. ctx governs the call; the COMMIT is waited for.
func (s *Store) MarkEnforced(ctx context.Context, operation string) (registry.Rollout, error) {
	if operation == "" {
		return registry.Rollout{}, errors.New("idempg: mark enforced: an operation name is required")
	}
	now, _ := s.clock()
	var out registry.Rollout
	err := inTx(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, rolloutQueries.Get("RolloutMarkEnforced"), now, operation); err != nil {
			return err
		}
		var err error
		out, err = readRollout(ctx, tx, "Rollout", operation)
		return err
	})
	if err != nil {
		return registry.Rollout{}, fmt.Errorf("idempg: mark enforced: %w", translate(err))
	}
	return out, nil
}

// AddVerdicts adds each count to its total in one transaction, skipping
// zero counts, in key order (so that concurrent calls never deadlock); an
// invalid count (registry.VerdictCount.Validate) is an error and nothing
// is added. See registry.RolloutStore. ctx governs the call.
func (s *Store) AddVerdicts(ctx context.Context, counts []registry.VerdictCount) error {
	var add []registry.VerdictCount
	for _, v := range counts {
		if err := v.Validate(); err != nil {
			return fmt.Errorf("idempg: %w", err)
		}
		if v.Count > 0 {
			add = append(add, v)
		}
	}
	if len(add) == 0 {
		return nil
	}
	slices.SortFunc(add, func(a, b registry.VerdictCount) int {
		return cmp.Or(cmp.Compare(a.Operation, b.Operation), cmp.Compare(a.Tenant, b.Tenant),
			cmp.Compare(a.Mode, b.Mode), cmp.Compare(a.Verdict, b.Verdict))
	})
	now, _ := s.clock()
	err := inTx(ctx, s.pool, func(tx pgx.Tx) error {
		for _, v := range add {
			if _, err := tx.Exec(ctx, rolloutQueries.Get("AddVerdict"), now, v.Operation, v.Tenant, v.Mode, v.Verdict, v.Count); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("idempg: add verdicts: %w", translate(err))
	}
	return nil
}

// Verdicts returns the operation's verdict totals ordered by tenant, mode
// and verdict (byte order); see registry.RolloutStore. ctx governs the
// query.
func (s *Store) Verdicts(ctx context.Context, operation string) ([]registry.VerdictCount, error) {
	rows, err := s.pool.Query(ctx, rolloutQueries.Get("Verdicts"), operation)
	if err != nil {
		return nil, fmt.Errorf("idempg: verdicts: %w", translate(err))
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (registry.VerdictCount, error) {
		var v registry.VerdictCount
		err := row.Scan(&v.Operation, &v.Tenant, &v.Mode, &v.Verdict, &v.Count, &v.UpdatedAt)
		v.UpdatedAt = v.UpdatedAt.UTC()
		return v, err
	})
	if err != nil {
		return nil, fmt.Errorf("idempg: verdicts: %w", translate(err))
	}
	return list, nil
}

// readRollout reads the operation's row with the named query through q;
// no row is Rollout{Operation: operation}.
func readRollout(ctx context.Context, q rowQuerier, query, operation string) (registry.Rollout, error) {
	r, err := scanRollout(q.QueryRow(ctx, rolloutQueries.Get(query), operation))
	if errors.Is(err, pgx.ErrNoRows) {
		return registry.Rollout{Operation: operation}, nil
	}
	return r, err
}

// scanRollout scans one row of the Rollout queries.
func scanRollout(row pgx.Row) (registry.Rollout, error) {
	var (
		r           registry.Rollout
		allow, deny string
		enforcedAt  *time.Time
	)
	if err := row.Scan(&r.Operation, &r.Mode, &r.Percent, &r.ByPrincipal, &allow, &deny, &r.Forced,
		&enforcedAt, &r.Version, &r.UpdatedAt, &r.UpdatedBy); err != nil {
		return registry.Rollout{}, err
	}
	if enforcedAt != nil {
		r.EnforcedAt = enforcedAt.UTC()
	}
	r.UpdatedAt = r.UpdatedAt.UTC()
	var err error
	if r.Allow, err = parseTenants(allow); err != nil {
		return registry.Rollout{}, err
	}
	if r.Deny, err = parseTenants(deny); err != nil {
		return registry.Rollout{}, err
	}
	return r, nil
}

// tenantLists encodes the allow and deny lists as the JSON arrays the
// table holds ("[]" for none).
func tenantLists(allow, deny []string) (string, string, error) {
	enc := func(l []string) (string, error) {
		if len(l) == 0 {
			return "[]", nil
		}
		b, err := json.Marshal(l)
		return string(b), err
	}
	a, err := enc(allow)
	if err != nil {
		return "", "", err
	}
	d, err := enc(deny)
	return a, d, err
}

// parseTenants decodes a JSON array of tenants; an empty one is nil.
func parseTenants(s string) ([]string, error) {
	var l []string
	if err := json.Unmarshal([]byte(s), &l); err != nil {
		return nil, fmt.Errorf("a rollout's tenant list is not a JSON array of text: %w", err)
	}
	if len(l) == 0 {
		return nil, nil
	}
	return l, nil
}
