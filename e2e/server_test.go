package e2e

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/harness/launch"
	"github.com/idemkit/idem/internal/keygen"
)

const (
	startTimeout = 30 * time.Second // until "listening on"
	stopTimeout  = 10 * time.Second // from SIGTERM to exit, then SIGKILL
)

// server is one "idem serve" (or "idem provider") child process.
type server struct {
	name   string // in recorded histories ("A", "B", "provider"); "" for "-"
	rev    string // its --api-revision; "" means v1
	url    string // http://ADDR
	child  *launch.Child
	client *http.Client
}

// startServer runs "idem serve --addr 127.0.0.1:0 --db DSN EXTRA…" in its
// own process group, waits for its "listening on" line and stops it with
// SIGTERM when t ends, failing t unless it then exits 0.
func startServer(t *testing.T, dsn string, extraArgs ...string) *server {
	t.Helper()
	return startServerEnv(t, nil, dsn, extraArgs...)
}

// startServerEnv is startServer with the extra environment variables env.
func startServerEnv(t *testing.T, env []string, dsn string, extraArgs ...string) *server {
	t.Helper()
	client := &http.Client{
		Timeout:   2 * time.Minute,
		Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256},
	}
	args := append([]string{"serve", "--addr", "127.0.0.1:0", "--db", dsn}, extraArgs...)
	return spawn(t, env, client, (*server).stop, args...)
}

// spawn runs "idem ARGS…" with the extra environment variables env in its
// own process group, with client for its requests, and waits up to
// startTimeout for its "listening on" line. When t ends, end stops it.
// An "idem serve" without --admin-addr gets "--admin-addr 127.0.0.1:0",
// where metric reads its metrics (never on the API's port).
func spawn(t *testing.T, env []string, client *http.Client, end func(*server, *testing.T), args ...string) *server {
	t.Helper()
	if len(args) > 0 && args[0] == "serve" && !slices.Contains(args, "--admin-addr") {
		args = append(slices.Clip(args), "--admin-addr", "127.0.0.1:0")
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	c, err := launch.Start(ctx, launch.Spec{Bin: idemBin, Args: args, Env: env})
	if err != nil {
		t.Fatal(err) // the process is gone; err ends with its output
	}
	s := &server{url: c.URL(), child: c, client: client}
	t.Cleanup(func() { end(s, t) }) // it logs the output if t failed
	return s
}

// stop sends SIGTERM and waits for a clean exit; after stopTimeout it
// kills the process group. On failure it logs the server's output.
func (s *server) stop(t *testing.T) {
	s.client.CloseIdleConnections()
	if err := s.child.Stop(stopTimeout); err != nil {
		t.Errorf("pid %d: %v", s.child.Pid(), err)
	}
	if t.Failed() {
		t.Logf("%s %s output:\n%s", s.child.Name(), s.url, s.child.Log())
	}
}

// reply is a response as received.
type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) String() string {
	return strconv.Itoa(r.status) + " " + r.header.Get("Content-Type") + " " + string(r.body)
}

// send makes one request. header holds extra header lines (added, so a
// name given twice is sent twice); a body is sent as application/json
// unless header sets Content-Type. token "" sends no Authorization.
func (s *server) send(method, path, token string, header http.Header, body string) (reply, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.url+path, rd)
	if err != nil {
		return reply{}, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, vs := range header {
		req.Header.Del(k)
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

// post sends POST /v1/payments with an Idempotency-Key (none if key is "")
// and extra header lines as name, value pairs.
func (s *server) post(t *testing.T, token, key, body string, kv ...string) reply {
	t.Helper()
	r, err := s.send(http.MethodPost, "/v1/payments", token, postHeader(key, kv...), body)
	if err != nil {
		t.Fatalf("POST /v1/payments: %v", err)
	}
	return r
}

// postHeader holds the key a test means by key (keygen.ForLabel: a label
// such as "k-ref" becomes a key the service's strict key policy accepts,
// "raw:VALUE" is sent as VALUE) and the extra lines, sent as they are.
func postHeader(key string, kv ...string) http.Header {
	h := http.Header{}
	if key != "" {
		h.Add("Idempotency-Key", keygen.ForLabel(key))
	}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// get sends GET path.
func (s *server) get(t *testing.T, token, path string) reply {
	t.Helper()
	r, err := s.send(http.MethodGet, path, token, nil, "")
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return r
}

// reservations returns how many reservations of payments.create the
// server has made (its idem_reservation_seconds histogram count).
func (s *server) reservations(t *testing.T) int {
	t.Helper()
	return s.metric(t, "idem_reservation_seconds_count")
}

// metric returns the server's value of the payments.create series of a
// counter (or a histogram's _count), 0 while it has none.
func (s *server) metric(t *testing.T, name string) int {
	t.Helper()
	what := "admin"
	if slices.Contains(s.child.Args(), "--operators") {
		what = "console"
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	addr, err := s.child.AddrOf(ctx, what)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := s.client.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics on the admin listener: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := reply{status: resp.StatusCode, header: resp.Header, body: b}
	if r.status != http.StatusOK {
		t.Fatalf("GET /metrics on the admin listener: %v", r)
	}
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\{operation="payments\.create"\} (\d+)$`)
	m := re.FindSubmatch(r.body)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}
