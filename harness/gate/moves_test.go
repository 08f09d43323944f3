package gate

import (
	"strings"
	"testing"
)

// TestValidateMoves: a move configuration Run cannot use is refused
// before anything starts, saying why.
func TestValidateMoves(t *testing.T) {
	pg := map[string]string{"a": "postgres://h/a", "b": "postgres://h/b"}
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{MoveCrash: true}, "needs tenant moves"},
		{Config{Moves: []TenantMove{{"tenant-1", "b"}}}, "need shards"},
		{Config{Shards: map[string]string{"a": "sqlite:a.db", "b": "postgres://h/b"}, ShardDefault: "a", Moves: []TenantMove{{"tenant-1", "b"}}}, "need shards"},
		{Config{Shards: pg, ShardDefault: "a", Moves: []TenantMove{{"tenant-1", "z"}}}, "not a shard"},
		{Config{Shards: pg, ShardDefault: "a", Moves: []TenantMove{{"tenant-1", "b"}, {"tenant-1", "a"}}}, "moves twice"},
		{Config{Shards: pg, ShardDefault: "a", ShardMap: map[string]string{"tenant-1": "b"}, Moves: []TenantMove{{"tenant-1", "b"}}}, "on b already"},
	} {
		if err := c.cfg.validateMoves(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error saying %q", c.cfg.Moves, err, c.want)
		}
	}
	ok := Config{Shards: pg, ShardDefault: "a", Moves: []TenantMove{{"tenant-1", "b"}}, MoveCrash: true}
	if err := ok.validateMoves(); err != nil {
		t.Errorf("a valid move: %v", err)
	}
}
