package idempg

import (
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/idemkit/idem/internal/pgtest"
)

// TestTCPUserTimeout: the Store's connections carry TCP_USER_TIMEOUT —
// the default, the one asked for — and none when it is turned off.
func TestTCPUserTimeout(t *testing.T) {
	dsn := pgtest.DSN(t)
	for _, tc := range []struct {
		opt  time.Duration
		want int
	}{{0, int(DefaultTCPUserTimeout.Milliseconds())}, {7 * time.Second, 7000}, {-1, 0}} {
		st, err := Open(t.Context(), dsn, Options{TCPUserTimeout: tc.opt})
		if err != nil {
			t.Fatal(err)
		}
		conn, err := st.Pool().Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		tcp, ok := conn.Conn().PgConn().Conn().(*net.TCPConn)
		if !ok {
			t.Fatalf("connection is a %T, not TCP", conn.Conn().PgConn().Conn())
		}
		raw, err := tcp.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var got int
		var gerr error
		raw.Control(func(fd uintptr) { got, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT) })
		conn.Release()
		st.Close()
		if gerr != nil || got != tc.want {
			t.Errorf("TCPUserTimeout %v: socket has %d ms (%v); want %d", tc.opt, got, gerr, tc.want)
		}
	}
}
