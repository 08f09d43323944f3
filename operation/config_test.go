package operation_test

import (
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/operation"
)

// TestValidateReplayCacheMargin: a replay cache whose margin is not
// shorter than the retention would hold answers and never serve one (an
// entry is served only until its record's expiry minus the margin), so
// Validate refuses it; a shorter margin, or the cache off, passes.
func TestValidateReplayCacheMargin(t *testing.T) {
	for _, c := range []struct {
		name      string
		retention time.Duration
		cache     operation.ReplayCache
		refused   bool
	}{
		{"default margin, default retention", 0, operation.ReplayCache{Entries: 10}, false},
		{"margin equal to the default retention", 0, operation.ReplayCache{Entries: 10, Margin: 24 * time.Hour}, true},
		{"margin longer than the retention", time.Hour, operation.ReplayCache{Entries: 10, Margin: 2 * time.Hour}, true},
		{"default margin equal to a one-minute retention", time.Minute, operation.ReplayCache{Entries: 10}, true},
		{"margin shorter than the retention", time.Hour, operation.ReplayCache{Entries: 10, Margin: 59 * time.Minute}, false},
		{"cache off", time.Minute, operation.ReplayCache{Margin: time.Hour}, false},
	} {
		cfg := &operation.Config{Name: "orders.create", APIRevision: "v1", Retention: c.retention, ReplayCache: c.cache}
		err := cfg.Validate()
		if got := err != nil; got != c.refused {
			t.Errorf("%s: Validate = %v; want refused %v", c.name, err, c.refused)
		} else if err != nil && !strings.Contains(err.Error(), "ReplayCache.Margin") {
			t.Errorf("%s: the error %q does not name ReplayCache.Margin", c.name, err)
		}
	}
}
