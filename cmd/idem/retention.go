package main

import (
	"flag"
	"fmt"
	"time"
)

// Defaults of the four windows "idem serve" checks --retention against.
// The default --retention (24h) covers all of them.
const (
	defaultClientRetryWindow    = 24 * time.Hour
	defaultQueueBacklogWindow   = time.Hour
	defaultReconciliationWindow = 24 * time.Hour
	defaultRestoreWindow        = 24 * time.Hour
)

// retentionFlags are the windows a record's retention must cover (seed
// 000; docs/operations.md, "Choosing the retention"):
//
//	--client-retry-window D     how long a client may retry one request (default 24h)
//	--queue-backlog-window D    how long a request may wait in a queue in front of the server (default 1h)
//	--reconciliation-window D   how long a downstream may take to report a settled effect (default 24h)
//	--restore-window D          how far back a restored backup of a client or upstream may reach (default 24h)
//
// Each may be 0 (the deployment has no such source of late requests); none
// may be negative. "idem serve" refuses to start when --retention is
// shorter than the longest of them: a request arriving late from that
// source would find its record retired (409 KEY_RETIRED) instead of its
// answer.
type retentionFlags struct {
	windows []retentionWindow
}

// retentionWindow is one window and the flag that sets it.
type retentionWindow struct {
	flag string
	d    *time.Duration
}

func addRetentionFlags(fs *flag.FlagSet) retentionFlags {
	w := func(name string, def time.Duration, usage string) retentionWindow {
		return retentionWindow{flag: name, d: fs.Duration(name, def, usage+"; --retention must be at least this long (0: none)")}
	}
	return retentionFlags{windows: []retentionWindow{
		w("client-retry-window", defaultClientRetryWindow, "how long a client may go on retrying one request"),
		w("queue-backlog-window", defaultQueueBacklogWindow, "how long a request may wait in a queue in front of the server before it is delivered"),
		w("reconciliation-window", defaultReconciliationWindow, "how long a downstream reconciliation may take to report an effect and have it retried"),
		w("restore-window", defaultRestoreWindow, "how far back a restored backup of a client or upstream may reach, whose requests are sent again"),
	}}
}

// check reports why retention does not cover every window, or nil: the
// first negative window, or the longest window when retention is shorter.
func (f retentionFlags) check(retention time.Duration) error {
	var longest retentionWindow
	for _, w := range f.windows {
		if *w.d < 0 {
			return fmt.Errorf("--%s must not be negative", w.flag)
		}
		if longest.d == nil || *w.d > *longest.d {
			longest = w
		}
	}
	if retention < *longest.d {
		return fmt.Errorf("--retention %v is shorter than --%s %v: a request sent again within that window would find its record retired (409 KEY_RETIRED) instead of its answer; raise --retention to at least %v or shorten the window",
			retention, longest.flag, *longest.d, *longest.d)
	}
	return nil
}
