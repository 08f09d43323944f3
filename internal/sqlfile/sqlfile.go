// Package sqlfile reads named queries from .sql files, so SQL lives in SQL
// files rather than in Go strings. A file holds blocks that start with a
// line "-- name: Name"; everything up to the next such line is the query.
// Text before the first name line is ignored (use it for comments).
package sqlfile

import (
	"fmt"
	"io/fs"
	"strings"
)

// Queries maps names to SQL text.
type Queries map[string]string

// MustLoad reads every named query of the files matching pattern in fsys
// and panics on a duplicate name or an unreadable file; it is meant for
// package initialisation of embedded files, where a failure is a build
// defect.
func MustLoad(fsys fs.FS, pattern string) Queries {
	q, err := Load(fsys, pattern)
	if err != nil {
		panic(err)
	}
	return q
}

// Load reads every named query of the files matching pattern in fsys.
func Load(fsys fs.FS, pattern string) (Queries, error) {
	files, err := fs.Glob(fsys, pattern)
	if err != nil {
		return nil, err
	}
	q := Queries{}
	for _, f := range files {
		b, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, err
		}
		if err := q.parse(f, string(b)); err != nil {
			return nil, err
		}
	}
	return q, nil
}

func (q Queries) parse(file, text string) error {
	name := ""
	var body strings.Builder
	flush := func() error {
		if name == "" {
			return nil
		}
		if _, dup := q[name]; dup {
			return fmt.Errorf("sqlfile: %s: query %q defined twice", file, name)
		}
		q[name] = strings.TrimSpace(body.String())
		body.Reset()
		return nil
	}
	for line := range strings.Lines(text) {
		if n, ok := strings.CutPrefix(strings.TrimSpace(line), "-- name:"); ok {
			if err := flush(); err != nil {
				return err
			}
			name = strings.TrimSpace(n)
			continue
		}
		if name != "" {
			body.WriteString(line)
		}
	}
	return flush()
}

// Get returns the named query and panics if there is none: a missing
// query is a build defect, caught by any test that runs the code.
func (q Queries) Get(name string) string {
	s, ok := q[name]
	if !ok {
		panic("sqlfile: no query named " + name)
	}
	return s
}
