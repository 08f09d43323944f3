package idempg

import (
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// DefaultTCPUserTimeout is Options.TCPUserTimeout when it is 0.
const DefaultTCPUserTimeout = 30 * time.Second

// applyTCPUserTimeout makes every connection of cfg dial with the socket
// option TCP_USER_TIMEOUT set to d (on Linux; elsewhere nothing changes),
// keeping the DSN's connect_timeout. d <= 0 changes nothing.
//
// Why: a COMMIT is waited for whatever the caller's context does
// (commit.go), so what bounds it when the database's host is gone is the
// kernel. A live server acknowledges what it receives at once, even while
// its COMMIT waits for a slow standby; only an unreachable host leaves data
// or keepalive probes unacknowledged. The dialer sends keepalive probes
// after 15 s of silence, and TCP_USER_TIMEOUT drops the connection once
// data or a probe has been unacknowledged for d — about 15 s + d in all,
// instead of retransmitting for about 15 minutes (tcp_retries2) or
// waiting for pgx's 5-minute keepalive — and the call fails as for any
// lost connection (registry.ErrUnavailable; the middleware then reads the
// record back). pgx has no setting for it (libpq's tcp_user_timeout),
// hence this dialer.
func applyTCPUserTimeout(cfg *pgconn.Config, d time.Duration) {
	if d <= 0 || userTimeoutControl == nil {
		return
	}
	dialer := &net.Dialer{
		Timeout:   cfg.ConnectTimeout,
		KeepAlive: 15 * time.Second,
		Control:   userTimeoutControl(d),
	}
	cfg.DialFunc = dialer.DialContext
}
