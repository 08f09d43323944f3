package launch

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"testing"
)

// helperEnv, when set, makes the test binary the helper process of that
// mode instead of running the tests.
const helperEnv = "LAUNCH_TEST_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helper(mode))
	}
	os.Exit(m.Run())
}

// helper is a tiny server, run as a child by the tests. Modes:
//
//	serve     logs "listening on ADDR" and serves until SIGTERM, then exits 0
//	slog      the same, with the line in slog's text form
//	stubborn  serves and ignores SIGTERM
//	failterm  serves and exits 1 on SIGTERM
//	silent    logs its pid, never the line, and blocks
//	exit      logs its pid and exits 3
//
// A serving helper answers GET /say?m=A&m=B by writing A and then B to
// stdout, each in its own write, and logs "got SIGNAL" for SIGUSR1.
// Every helper starts by logging "pid PID cwd DIR".
func helper(mode string) int {
	wd, _ := os.Getwd()
	fmt.Fprintf(os.Stderr, "pid %d cwd %s\n", os.Getpid(), wd)
	switch mode {
	case "silent":
		select {}
	case "exit":
		return 3
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGUSR1)
	if mode == "stubborn" {
		signal.Ignore(syscall.SIGTERM)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	http.HandleFunc("/say", func(w http.ResponseWriter, r *http.Request) {
		for _, m := range r.URL.Query()["m"] {
			os.Stdout.WriteString(m)
		}
	})
	go http.Serve(ln, nil)
	if mode == "slog" {
		fmt.Fprintf(os.Stderr, "time=now level=INFO msg=\"listening on %s\" addr=%s\n", ln.Addr(), ln.Addr())
	} else {
		fmt.Fprintf(os.Stderr, "listening on %s\n", ln.Addr())
	}
	for sig := range sigs {
		if sig == syscall.SIGUSR1 {
			fmt.Fprintf(os.Stdout, "got %v\n", sig)
			continue
		}
		if mode == "failterm" {
			return 1
		}
		return 0
	}
	return 0
}

// spec runs the test binary as the helper of mode.
func spec(mode string) Spec {
	return Spec{Bin: os.Args[0], Env: []string{helperEnv + "=" + mode}, Name: "helper " + mode}
}
