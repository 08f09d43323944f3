package idemmysql

import (
	"cmp"
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/idemkit/idem/internal/sqlfile"
	"github.com/idemkit/idem/registry"
)

//go:embed rollout.sql
var rolloutFiles embed.FS

// rolloutQueries are the named queries of the rollouts and their verdict
// counts (rollout.sql).
var rolloutQueries = sqlfile.MustLoad(rolloutFiles, "rollout.sql")

var _ registry.RolloutStore = (*Store)(nil)

// Rollouts returns every operation's rollout row, ordered by operation;
// see registry.RolloutStore. ctx governs the query.
func (s *Store) Rollouts(ctx context.Context) ([]registry.Rollout, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	rows, err := queryRows(ctx, s.db, rolloutQueries.Get("Rollouts"))
	if err != nil {
		return nil, s.fail("rollouts", err)
	}
	defer rows.Close()
	var list []registry.Rollout
	for rows.Next() {
		r, err := scanRollout(rows)
		if err != nil {
			return nil, s.fail("rollouts", err)
		}
		list = append(list, r)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("rollouts", err)
	}
	return list, nil
}

// Rollout returns the operation's row, or Rollout{Operation: operation}
// when it has none; see registry.RolloutStore. ctx governs the query.
func (s *Store) Rollout(ctx context.Context, operation string) (registry.Rollout, error) {
	if err := s.checkOpen(); err != nil {
		return registry.Rollout{}, err
	}
	r, err := readRollout(ctx, s.db, operation)
	if err != nil {
		return registry.Rollout{}, s.fail("rollout", err)
	}
	return r, nil
}

// SetRollout applies c: in one transaction it reads the row, checks
// c.Seen and the force rule (registry.CheckRolloutChange), writes the row
// with a compare-and-set on the version (for Seen 0 an insert, which a
// row that appeared meanwhile makes fail on the primary key) — either way
// a concurrent change makes it registry.ErrRolloutStale — reads back what
// it stored and appends the audit entry; see registry.RolloutStore. ctx
// governs the call.
func (s *Store) SetRollout(ctx context.Context, c registry.RolloutChange) (registry.Rollout, error) {
	if err := c.Validate(); err != nil {
		return registry.Rollout{}, fmt.Errorf("idemmysql: %w", err)
	}
	allow, deny, err := tenantLists(c.Allow, c.Deny)
	if err != nil {
		return registry.Rollout{}, fmt.Errorf("idemmysql: set rollout: %w", err)
	}
	var out registry.Rollout
	err = s.writeTx(ctx, "set rollout", func(tx *sql.Tx, now any) error {
		old, err := readRollout(ctx, tx, c.Operation)
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
		n, err := exec(ctx, tx, rolloutQueries.Get(query), now, c.Operation, c.Mode, c.Percent,
			boolInt(c.ByPrincipal), allow, deny, boolInt(out.Forced), boolInt(out.Enforcing()), c.Actor, c.Seen)
		if key, dup := duplicateKey(err); dup && key == "PRIMARY" || err == nil && n == 0 {
			return fmt.Errorf("%w: %s changed meanwhile", registry.ErrRolloutStale, c.Operation)
		}
		if err != nil {
			return err
		}
		stored, err := readRollout(ctx, tx, c.Operation)
		if err != nil {
			return err
		}
		out.Version, out.UpdatedAt, out.EnforcedAt = stored.Version, stored.UpdatedAt, stored.EnforcedAt
		at, err := txNow(ctx, tx, now)
		if err != nil {
			return err
		}
		_, err = exec(ctx, tx, auditQueries.Get("AppendAudit"), at, entry.Actor, entry.Action, nil, entry.Detail)
		return err
	})
	if err != nil {
		return registry.Rollout{}, err
	}
	return out, nil
}

// MarkEnforced sets the operation's EnforcedAt if unset, creating its row
// (Mode "") if there is none, in one upsert, and returns the row; see
// registry.RolloutStore. A row an operator set off without force is left
// as it is (no instance that follows it enforces the operation): the
// returned row says so. ctx governs the call.
func (s *Store) MarkEnforced(ctx context.Context, operation string) (registry.Rollout, error) {
	if operation == "" {
		return registry.Rollout{}, errors.New("idemmysql: mark enforced: an operation name is required")
	}
	var out registry.Rollout
	err := s.writeTx(ctx, "mark enforced", func(tx *sql.Tx, now any) error {
		if _, err := exec(ctx, tx, rolloutQueries.Get("RolloutMarkEnforced"), now, operation); err != nil {
			return err
		}
		var err error
		out, err = readRollout(ctx, tx, operation)
		return err
	})
	if err != nil {
		return registry.Rollout{}, err
	}
	return out, nil
}

// AddVerdicts adds each count to its total in one write transaction,
// skipping zero counts; an invalid count (registry.VerdictCount.Validate)
// is an error and nothing is added. See registry.RolloutStore. ctx
// governs the call.
func (s *Store) AddVerdicts(ctx context.Context, counts []registry.VerdictCount) error {
	for _, v := range counts {
		if err := v.Validate(); err != nil {
			return fmt.Errorf("idemmysql: %w", err)
		}
	}
	if !hasCounts(counts) {
		return nil
	}
	// One lock order for every caller: InnoDB would otherwise deadlock two
	// batches that upsert the same rows in different orders.
	counts = slices.SortedFunc(slices.Values(counts), func(a, b registry.VerdictCount) int {
		return cmp.Or(strings.Compare(a.Operation, b.Operation), strings.Compare(a.Tenant, b.Tenant),
			strings.Compare(a.Mode, b.Mode), strings.Compare(a.Verdict, b.Verdict))
	})
	return s.writeTx(ctx, "add verdicts", func(tx *sql.Tx, now any) error {
		for _, v := range counts {
			if v.Count == 0 {
				continue
			}
			if _, err := exec(ctx, tx, rolloutQueries.Get("AddVerdict"), now, v.Operation, v.Tenant, v.Mode, v.Verdict, v.Count); err != nil {
				return err
			}
		}
		return nil
	})
}

// Verdicts returns the operation's verdict totals ordered by tenant, mode
// and verdict; see registry.RolloutStore. ctx governs the query.
func (s *Store) Verdicts(ctx context.Context, operation string) ([]registry.VerdictCount, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	rows, err := queryRows(ctx, s.db, rolloutQueries.Get("Verdicts"), operation)
	if err != nil {
		return nil, s.fail("verdicts", err)
	}
	defer rows.Close()
	var list []registry.VerdictCount
	for rows.Next() {
		var (
			v       registry.VerdictCount
			updated int64
		)
		if err := rows.Scan(&v.Operation, &v.Tenant, &v.Mode, &v.Verdict, &v.Count, &updated); err != nil {
			return nil, s.fail("verdicts", err)
		}
		v.UpdatedAt = fromMicros(updated)
		list = append(list, v)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("verdicts", err)
	}
	return list, nil
}

// readRollout reads the operation's row through q; no row is
// Rollout{Operation: operation}.
func readRollout(ctx context.Context, q querier, operation string) (registry.Rollout, error) {
	r, err := scanRollout(queryRow(ctx, q, rolloutQueries.Get("Rollout"), operation))
	if errors.Is(err, sql.ErrNoRows) {
		return registry.Rollout{Operation: operation}, nil
	}
	return r, err
}

// scanRollout scans one row of the Rollout or Rollouts query.
func scanRollout(row interface{ Scan(...any) error }) (registry.Rollout, error) {
	var (
		r                   registry.Rollout
		byPrincipal, forced int64
		allow, deny         string
		enforcedAt          sql.NullInt64
		updated             int64
	)
	if err := row.Scan(&r.Operation, &r.Mode, &r.Percent, &byPrincipal, &allow, &deny, &forced,
		&enforcedAt, &r.Version, &updated, &r.UpdatedBy); err != nil {
		return registry.Rollout{}, err
	}
	r.ByPrincipal, r.Forced = byPrincipal != 0, forced != 0
	if enforcedAt.Valid {
		r.EnforcedAt = fromMicros(enforcedAt.Int64)
	}
	r.UpdatedAt = fromMicros(updated)
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

// hasCounts reports whether any count is above zero.
func hasCounts(counts []registry.VerdictCount) bool {
	for _, v := range counts {
		if v.Count > 0 {
			return true
		}
	}
	return false
}

// boolInt is the TINYINT 0 or 1 for b.
func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
