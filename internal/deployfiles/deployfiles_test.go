package deployfiles

import (
	"slices"
	"testing"
)

// TestNames: the tokenizer keeps metric names and drops functions,
// aggregations, keywords, label names and values, ranges, numbers and
// Grafana variables.
func TestNames(t *testing.T) {
	for _, c := range []struct {
		expr string
		want []string
	}{
		{`idem_store_up == 0`, []string{"idem_store_up"}},
		{`histogram_quantile(0.99, sum by (job, le) (rate(idem_reservation_seconds_bucket{job=~"$job", operation="a{b}"}[$__rate_interval])))`,
			[]string{"idem_reservation_seconds_bucket"}},
		{`sum without (instance) (rate(a_total[5m] offset 1h)) / on (job) group_left (shard) b_total > bool 1e3`, []string{"a_total", "b_total"}},
		{`idem:reservation_seconds:p99_5m > 0.01 and on (job, operation) idem:reservation:rate5m > 0.5`,
			[]string{"idem:reservation_seconds:p99_5m", "idem:reservation:rate5m"}},
		{`time() - max by (job) (x) > 7200 unless y{le="+Inf"} or sum(z) by (op)`, []string{"x", "y", "z"}},
		{`label_values(idem_requests_total, job)`, []string{"idem_requests_total"}},
		{`count(up) or vector(0) + ${var:csv} * [[old]] 'it''s' + "\"q\" idem_fake"`, []string{"up"}},
	} {
		if got := Names(c.expr); !slices.Equal(got, c.want) {
			t.Errorf("Names(%q) = %q, want %q", c.expr, got, c.want)
		}
	}
}

// TestRuleFile: records, alerts, their expressions and runbooks are read;
// an expression not on its line is refused.
func TestRuleFile(t *testing.T) {
	r, err := RuleFile(`groups:
  - name: g
    rules:
      # - alert: Commented
      - record: a:b
        expr: sum(x)
      - alert: A
        expr: "a:b > 1"
        annotations:
          runbook_url: "docs/operations.md#a"
      - record: c:d
        expr: y
      - alert: B
        expr: z == 0
`)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Records, []string{"a:b", "c:d"}) || !slices.Equal(r.Exprs, []string{"sum(x)", "a:b > 1", "y", "z == 0"}) ||
		!slices.Equal(r.Alerts, []Alert{{Name: "A", Expr: "a:b > 1", RunbookURL: "docs/operations.md#a"}, {Name: "B", Expr: "z == 0"}}) {
		t.Errorf("RuleFile: %+v", r)
	}
	if _, err := RuleFile("- alert: A\n  expr: |\n    x > 1\n"); err == nil {
		t.Error("a block expression was read as empty")
	}
}

// TestDashboardQueries: panel targets' expr and query variables' query,
// not a datasource variable's.
func TestDashboardQueries(t *testing.T) {
	got, err := DashboardQueries([]byte(`{"panels":[{"targets":[{"expr":"a"}]},{"panels":[{"targets":[{"expr":"b"}]}]}],
		"templating":{"list":[{"type":"datasource","query":"prometheus"},{"type":"query","query":{"query":"label_values(c, job)"}},{"type":"query","query":"d"}]}}`))
	if err != nil || !slices.Equal(got, []string{"a", "b", "label_values(c, job)", "d"}) {
		t.Errorf("DashboardQueries: %q, %v", got, err)
	}
}
