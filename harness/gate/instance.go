package gate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/harness/launch"
)

// Instance timeouts.
const (
	startTimeout = 60 * time.Second // until "listening on"
	stopTimeout  = 40 * time.Second // from SIGTERM to exit (serve waits up to 30 s for requests)
	logKeep      = 64 << 10         // bytes of an instance's log kept for error messages
)

// instance is one "idem serve" (or "idem provider") child process in its
// own process group.
type instance struct {
	name  string
	child *launch.Child
	url   string
	// metricsURL is where GET /metrics is served: the admin listener of
	// an "idem serve --admin-addr", else url (a binary from before
	// metrics left the API's port).
	metricsURL string
	// op is the operation whose reservation histogram scrape reads; ""
	// means payments.OperationCreate.
	op string
	// restarted: the instance replaces one the gate killed; it may have
	// got no request before the load ended.
	restarted bool
}

// startInstance runs "BIN serve --addr 127.0.0.1:0 ARGS…" and returns once
// it logged "listening on ADDR" — and, when ARGS hold --admin-addr, its
// "admin listening on ADDR" line, where its metrics are. env, if any, is
// added to the gate's environment (IDEM_FAILPOINTS=…). On failure the
// process is killed.
func startInstance(ctx context.Context, name, bin string, args, env []string) (*instance, error) {
	in, err := startChild(ctx, name, bin, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...), env)
	if err != nil || !slices.Contains(args, "--admin-addr") {
		return in, err
	}
	actx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	addr, err := in.child.AddrOf(actx, "admin")
	if err != nil {
		in.kill()
		return nil, fmt.Errorf("gate: %w", err)
	}
	in.metricsURL = "http://" + addr
	return in, nil
}

// startChild runs "BIN ARGS…" and returns once it logged "listening on
// ADDR" (idem serve and idem provider both do), within startTimeout.
func startChild(ctx context.Context, name, bin string, args, env []string) (*instance, error) {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	c, err := launch.Start(ctx, launch.Spec{Name: name, Bin: bin, Args: args, Env: env, LogLimit: logKeep})
	if err != nil {
		return nil, fmt.Errorf("gate: %w", err)
	}
	return &instance{name: name, child: c, url: c.URL()}, nil
}

// kill sends SIGKILL to the instance's process group and waits for it.
func (in *instance) kill() { in.child.Kill() }

// stop sends SIGTERM and waits up to stopTimeout for a clean exit, then
// kills the group. It returns an error unless the instance exited 0.
func (in *instance) stop() error {
	if err := in.child.Stop(stopTimeout); err != nil {
		return fmt.Errorf("gate: %w", err)
	}
	return nil
}

// scrape reads the instance's reservation histogram from GET /metrics on
// its metricsURL.
func (in *instance) scrape(ctx context.Context) (Histogram, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cmp.Or(in.metricsURL, in.url)+"/metrics", nil)
	if err != nil {
		return Histogram{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Histogram{}, fmt.Errorf("gate: scraping %s: %w", in.name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Histogram{}, fmt.Errorf("gate: scraping %s: %s", in.name, resp.Status)
	}
	h, err := ParseReservationsOf(resp.Body, cmp.Or(in.op, payments.OperationCreate))
	if err != nil {
		return Histogram{}, fmt.Errorf("gate: scraping %s: %w", in.name, err)
	}
	return h, nil
}

var errNoHistogram = errors.New("no idem_reservation_seconds histogram for the operation")
