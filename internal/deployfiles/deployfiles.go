// Package deployfiles reads what the files under deploy/ ask of a running
// idem: the expressions and alerts of a Prometheus rule file, the queries
// of a Grafana dashboard, and the metric names a PromQL expression reads.
// It is for tests, which check those names against a real scrape.
//
// It is no PromQL parser (none is in the module graph): Names is a small
// tokenizer that drops what is not a metric name — string literals, label
// matchers in braces, ranges in brackets, the label lists of by, without,
// on, ignoring, group_left and group_right, function and aggregation
// names (an identifier followed by "("), keywords, numbers and durations,
// and Grafana's variables. RuleFile reads the one-line form rules.yml is
// written in, not YAML in general.
package deployfiles

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// keywords are PromQL's reserved words that can stand without "(" after
// them (aggregations written "sum by (x) (…)", operators, modifiers).
var keywords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "by": true, "without": true,
	"on": true, "ignoring": true, "group_left": true, "group_right": true, "atan2": true, "inf": true, "nan": true,
	"sum": true, "min": true, "max": true, "avg": true, "count": true, "stddev": true, "stdvar": true, "topk": true,
	"bottomk": true, "quantile": true, "count_values": true, "group": true, "limitk": true, "limit_ratio": true,
}

var (
	// grafanaVar matches $name, ${name…} and [[name]].
	grafanaVar = regexp.MustCompile(`\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*|\[\[[^\]]*\]\]`)
	// grouping matches a grouping keyword and its label list.
	grouping = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	// labelValues matches Grafana's label_values(METRIC, LABEL).
	labelValues = regexp.MustCompile(`label_values\(\s*([^,()]+?)\s*,\s*[A-Za-z_][A-Za-z0-9_]*\s*\)`)
)

// Names returns the metric names expr reads, each once, in order of first
// appearance. Grafana's label_values(METRIC, LABEL) reads METRIC.
func Names(expr string) []string {
	s := labelValues.ReplaceAllString(expr, "$1")
	s = grafanaVar.ReplaceAllString(s, " 0 ")
	s = dropQuoted(s)
	s = dropBetween(s, '{', '}')
	s = dropBetween(s, '[', ']')
	s = grouping.ReplaceAllString(s, " ")
	var names []string
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case isDigit(c) || c == '.': // a number or a duration: 0.99, 1e3, 0x1f, 5m
			for i < len(s) && (isIdent(s[i]) || s[i] == '.') {
				i++
			}
		case isIdentStart(c):
			j := i
			for j < len(s) && isIdent(s[j]) {
				j++
			}
			word := s[i:j]
			k := j
			for k < len(s) && (s[k] == ' ' || s[k] == '\t' || s[k] == '\n') {
				k++
			}
			call := k < len(s) && s[k] == '('
			if !call && !keywords[strings.ToLower(word)] && !slices.Contains(names, word) {
				names = append(names, word)
			}
			i = j
		default:
			i++
		}
	}
	return names
}

// dropQuoted blanks PromQL's string literals ("…" and '…' with
// backslash escapes, `…` raw).
func dropQuoted(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		q := s[i]
		if q != '"' && q != '\'' && q != '`' {
			b.WriteByte(q)
			continue
		}
		for i++; i < len(s) && s[i] != q; i++ {
			if s[i] == '\\' && q != '`' {
				i++
			}
		}
		b.WriteString(` "" `)
	}
	return b.String()
}

// dropBetween blanks everything from open to the matching close.
func dropBetween(s string, open, close byte) string {
	var b strings.Builder
	depth := 0
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == open:
			depth++
		case s[i] == close && depth > 0:
			depth--
			if depth == 0 {
				b.WriteByte(' ')
			}
		case depth == 0:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

func isDigit(c byte) bool      { return c >= '0' && c <= '9' }
func isIdentStart(c byte) bool { return c == '_' || c == ':' || c|0x20 >= 'a' && c|0x20 <= 'z' }
func isIdent(c byte) bool      { return isIdentStart(c) || isDigit(c) }

// Alert is an alerting rule of a rule file.
type Alert struct {
	Name       string
	Expr       string
	RunbookURL string // its runbook_url annotation, "" when it has none
}

// Rules is what RuleFile reads from a rule file.
type Rules struct {
	// Exprs are every rule's expression, recording and alerting.
	Exprs []string
	// Records are the names recording rules define.
	Records []string
	// Alerts are the alerting rules, in file order.
	Alerts []Alert
}

// RuleFile reads a Prometheus rule file written with each rule's
// "- record: NAME" or "- alert: NAME", "expr: EXPR" and "runbook_url:
// URL" on one line each (values plain or double-quoted). An expression
// that is not on its line ("|", ">", or empty) is an error: the file is
// read line by line, not as YAML.
func RuleFile(text string) (Rules, error) {
	var r Rules
	last := "" // the kind of the newest rule: "record" or "alert"
	for n, line := range strings.Split(text, "\n") {
		key, value, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || strings.HasPrefix(key, "#") {
			continue
		}
		value = unquote(strings.TrimSpace(value))
		switch strings.TrimPrefix(key, "- ") {
		case "record":
			r.Records, last = append(r.Records, value), "record"
		case "alert":
			r.Alerts, last = append(r.Alerts, Alert{Name: value}), "alert"
		case "expr":
			if value == "" || value == "|" || value == ">" || strings.HasPrefix(value, "|") || strings.HasPrefix(value, ">") {
				return r, fmt.Errorf("line %d: the expression is not on its line", n+1)
			}
			r.Exprs = append(r.Exprs, value)
			if last == "alert" {
				r.Alerts[len(r.Alerts)-1].Expr = value
			}
		case "runbook_url":
			if last != "alert" {
				return r, fmt.Errorf("line %d: runbook_url outside an alert", n+1)
			}
			r.Alerts[len(r.Alerts)-1].RunbookURL = value
		}
	}
	if len(r.Exprs) != len(r.Records)+len(r.Alerts) {
		return r, fmt.Errorf("%d expressions for %d recording and %d alerting rules", len(r.Exprs), len(r.Records), len(r.Alerts))
	}
	return r, nil
}

// unquote strips a double-quoted value's quotes and escapes.
func unquote(v string) string {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		var s string
		if json.Unmarshal([]byte(v), &s) == nil {
			return s
		}
	}
	return v
}

// DashboardQueries returns every query of a Grafana dashboard's JSON: each
// "expr" string (panel targets), in document order, then the "query" of
// each templating variable of type "query" (a string, or an object's
// "query" member).
func DashboardQueries(dashboard []byte) ([]string, error) {
	var doc any
	if err := json.Unmarshal(dashboard, &doc); err != nil {
		return nil, err
	}
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			keys := make([]string, 0, len(v))
			for k := range v {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				if s, ok := v[k].(string); ok && k == "expr" {
					out = append(out, s)
				} else if k != "templating" {
					walk(v[k])
				}
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(doc)
	var vars struct {
		Templating struct {
			List []struct {
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(dashboard, &vars); err != nil {
		return nil, err
	}
	for _, v := range vars.Templating.List {
		if v.Type != "query" {
			continue
		}
		switch q := v.Query.(type) {
		case string:
			out = append(out, q)
		case map[string]any:
			if s, ok := q["query"].(string); ok {
				out = append(out, s)
			}
		}
	}
	return out, nil
}
