package pgtest

import (
	"os"
	"strconv"
	"sync"
	"syscall"
)

// keepFDsFromDaemons marks every file descriptor this process inherited
// (above standard error) close-on-exec, once, before the first server is
// started. The Go runtime opens its own descriptors close-on-exec, but
// the ones a process was started with are not: a fuzzing worker holds
// its coordinator's pipes as descriptors 3 and 4. A postmaster started
// by pg_ctl outlives the command, and if the worker is killed (so that
// no cleanup stops the cluster) the postmaster keeps those pipes open,
// and the coordinator, which reads them until they close, waits forever.
// Nothing here passes an inherited descriptor to a child on purpose.
var keepFDsFromDaemons = sync.OnceFunc(func() {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return // no /proc: nothing to do that is portable
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
})
