package idemmysql

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/mytest"
)

// TestDurabilityRefused: Open refuses a server whose acknowledged commits
// a crash may lose — innodb_flush_log_at_trx_commit=2, or the binary log
// on with sync_binlog=0 — with ErrWeakDurability naming the setting;
// with Options.AllowWeakDurability it opens and logs an error for each
// weak setting. A server with the durable settings opens silently.
//
// threat:weak-commit-durability
func TestDurabilityRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, setting string
		opts          []string
	}{
		{"flush_log_at_trx_commit", "innodb_flush_log_at_trx_commit=2", []string{"--innodb-flush-log-at-trx-commit=2"}},
		{"sync_binlog", "sync_binlog=0", []string{"--log-bin=binlog", "--server-id=1", "--sync-binlog=0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dsn := mytest.Start(t, tc.opts...)
			s, err := Open(t.Context(), dsn, Options{})
			if err == nil {
				s.Close()
				t.Fatalf("Open accepted a server with %s", tc.setting)
			}
			if !errors.Is(err, ErrWeakDurability) || !strings.Contains(err.Error(), tc.setting) {
				t.Errorf("Open: %v, want ErrWeakDurability naming %s", err, tc.setting)
			}
			var log bytes.Buffer
			s, err = Open(t.Context(), dsn, Options{AllowWeakDurability: true,
				Logger: slog.New(slog.NewTextHandler(&log, nil))})
			if err != nil {
				t.Fatalf("Open with AllowWeakDurability: %v", err)
			}
			s.Close()
			if !strings.Contains(log.String(), "level=ERROR") || !strings.Contains(log.String(), tc.setting) {
				t.Errorf("log of an accepted weak setting: %q, want an error naming %s", log.String(), tc.setting)
			}
		})
	}
	t.Run("durable", func(t *testing.T) {
		t.Parallel()
		var log bytes.Buffer
		s, err := Open(t.Context(), mytest.DSN(t), Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
		if err != nil {
			t.Fatalf("Open on the durable test server: %v", err)
		}
		s.Close()
		if log.Len() != 0 {
			t.Errorf("Open on a durable server logged %q", log.String())
		}
	})
}
