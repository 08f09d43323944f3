package idemmysql

import (
	"fmt"
	"strconv"
	"sync"
)

// MySQL binds "?" placeholders in order; idem's SQL (the named queries,
// and the business statements of registry.Tx, which say $1, $2 … on
// every driver) numbers them. bind rewrites a query once into its "?"
// form and the order in which it uses the arguments: a repeated $N binds
// the same argument again. '…', "…" and `…` literals and -- and /* */
// comments are copied unchanged, so a '$1' inside a string is text.

// bound is a rewritten query: its "?" text and, for each "?", the index
// of the argument it binds.
type bound struct {
	text  string
	order []int
	max   int // the highest $N (0: none)
	err   error
}

var boundCache sync.Map // string → *bound

// bind returns query in "?" form with its arguments in binding order. A
// query without $N placeholders is returned as it is, with args. It
// reports an error when the query uses more arguments than args holds.
func bind(query string, args []any) (string, []any, error) {
	b := rewrite(query)
	if b.err != nil {
		return "", nil, b.err
	}
	if b.max == 0 {
		return query, args, nil
	}
	if b.max > len(args) {
		return "", nil, fmt.Errorf("idemmysql: query uses $%d but has %d arguments", b.max, len(args))
	}
	out := make([]any, len(b.order))
	for i, n := range b.order {
		out[i] = args[n]
	}
	return b.text, out, nil
}

// rewrite parses query once and caches the result.
func rewrite(query string) *bound {
	if v, ok := boundCache.Load(query); ok {
		return v.(*bound)
	}
	b := parse(query)
	boundCache.Store(query, b)
	return b
}

func parse(q string) *bound {
	b := &bound{}
	out := make([]byte, 0, len(q))
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case c == '\'' || c == '"' || c == '`':
			j := i + 1
			for j < len(q) {
				if q[j] == '\\' && c != '`' && j+1 < len(q) {
					j += 2
					continue
				}
				if q[j] == c {
					if j+1 < len(q) && q[j+1] == c { // doubled quote
						j += 2
						continue
					}
					break
				}
				j++
			}
			if j >= len(q) {
				b.err = fmt.Errorf("idemmysql: unterminated %c literal in query", c)
				return b
			}
			out = append(out, q[i:j+1]...)
			i = j + 1
		case c == '-' && i+1 < len(q) && q[i+1] == '-':
			j := i
			for j < len(q) && q[j] != '\n' {
				j++
			}
			out = append(out, q[i:j]...)
			i = j
		case c == '/' && i+1 < len(q) && q[i+1] == '*':
			j := i + 2
			for j+1 < len(q) && !(q[j] == '*' && q[j+1] == '/') {
				j++
			}
			j = min(j+2, len(q))
			out = append(out, q[i:j]...)
			i = j
		case c == '$' && i+1 < len(q) && q[i+1] >= '0' && q[i+1] <= '9':
			j := i + 1
			for j < len(q) && q[j] >= '0' && q[j] <= '9' {
				j++
			}
			n, err := strconv.Atoi(q[i+1 : j])
			if err != nil || n < 1 {
				b.err = fmt.Errorf("idemmysql: bad placeholder %q", q[i:j])
				return b
			}
			b.order = append(b.order, n-1)
			b.max = max(b.max, n)
			out = append(out, '?')
			i = j
		default:
			out = append(out, c)
			i++
		}
	}
	b.text = string(out)
	return b
}
