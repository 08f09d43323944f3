//go:build !linux

package idempg

import (
	"syscall"
	"time"
)

// userTimeoutControl is nil where TCP_USER_TIMEOUT is not set: the
// system's retransmission limits bound a COMMIT to a vanished host.
var userTimeoutControl func(d time.Duration) func(network, address string, c syscall.RawConn) error
