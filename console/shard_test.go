package console_test

import (
	"strings"
	"testing"

	"github.com/idemkit/idem/console"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/idemsqlite"
)

// TestShardNamed: a console given Config.Shard names that shard on its
// pages, so an operator knows whose operations it shows; without it no
// shard is named.
func TestShardNamed(t *testing.T) {
	for _, shard := range []string{"b", ""} {
		store, err := idemsqlite.OpenMemory(t.Context(), idemsqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(store.Close)
		e := newEnv(t, store, effect.Answer{}, func(c *console.Config) { c.Shard = shard })
		c, _ := e.login(aliceToken)
		_, _, body := e.do(c, "/admin/operations", nil)
		named := strings.Contains(body, `<strong id="shard">b</strong>`)
		if named != (shard == "b") || (shard == "" && strings.Contains(body, `id="shard"`)) {
			t.Errorf("Config.Shard %q: the operations page names shard b: %v", shard, named)
		}
	}
}
