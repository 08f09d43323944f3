package idempg

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// userTimeoutControl returns a net.Dialer Control that sets
// TCP_USER_TIMEOUT to d on TCP sockets.
var userTimeoutControl = func(d time.Duration) func(network, address string, c syscall.RawConn) error {
	return func(network, _ string, c syscall.RawConn) error {
		if network != "tcp" && network != "tcp4" && network != "tcp6" {
			return nil
		}
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d.Milliseconds()))
		})
		if err != nil {
			return err
		}
		return serr
	}
}
