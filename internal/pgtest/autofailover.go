package pgtest

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/procgroup"
)

// AutoctlEnv names the pg_autoctl binary (pg_auto_failover) an HA test
// runs; empty means "pg_autoctl" on PATH (Debian's
// postgresql-15-auto-failover installs /usr/bin/pg_autoctl).
const AutoctlEnv = "IDEM_PG_AUTOCTL"

// HA node names: the first primary (node 1) and its secondary (node 2).
const (
	NodeA = "node_a"
	NodeB = "node_b"
)

// Monitor settings (pgautofailover.*, milliseconds) an HA cluster runs
// with: tightened from the defaults (5 s period, 20 s before a node is
// unhealthy, 30 s demote timeout) so that a failover takes seconds.
// HAPartitionTimeout is the keepers' timeout.network_partition_timeout
// (seconds, default 20): a primary that reaches neither the monitor nor
// its standby stops itself after it. It must stay below the monitor's
// primary_demote_timeout, which is how long the monitor waits for a
// primary it cannot reach before it promotes: the old primary has
// stopped by then.
var HAMonitorSettings = map[string]int{
	"pgautofailover.health_check_period":               1000,
	"pgautofailover.health_check_timeout":              1000,
	"pgautofailover.health_check_max_retries":          1,
	"pgautofailover.health_check_retry_delay":          200,
	"pgautofailover.node_considered_unhealthy_timeout": 2000,
	"pgautofailover.primary_demote_timeout":            6000,
}

// HAPartitionTimeout is the keepers' network_partition_timeout, seconds.
const HAPartitionTimeout = 3

// HA timeouts.
const (
	haFormWait    = 2 * time.Minute // NewHACluster: until primary/secondary
	haStopWait    = time.Minute     // cleanup: until a keeper has stopped its server
	haStatePoll   = 100 * time.Millisecond
	haAutoctlWait = 3 * time.Minute // one pg_autoctl create
)

// HACluster is a pg_auto_failover formation on 127.0.0.1: a monitor and
// two PostgreSQL nodes (NodeA, NodeB), each supervised by its own keeper
// process (pg_autoctl run) in its own directory, with its own free port.
// The monitor, not the test, decides failovers: KillPostmaster and
// StopNode only cause them; RestartNode lets a node rejoin. Its methods
// are safe for concurrent use.
//
// With sync, both nodes take part in the replication quorum (the
// default): the primary runs synchronous_standby_names
// 'ANY 1 (pgautofailover_standby_N)', so a commit is acknowledged once
// the secondary has flushed it, and the monitor promotes only a
// secondary that was in sync. Without it (replication quorum false)
// the secondary streams asynchronously.
type HACluster struct {
	Sync    bool
	autoctl string
	monitor *haNode
	nodes   map[string]*haNode

	mu      sync.Mutex
	stopped bool
}

// haNode is one pg_autoctl-managed server: the monitor or a data node.
type haNode struct {
	name string
	c    *cluster // dir, data (PGDATA), port, bin, cred; c.log is pg_autoctl's log
	env  []string // pg_autoctl's environment: its own XDG directories

	mu     sync.Mutex
	keeper *exec.Cmd        // the running pg_autoctl, nil when stopped
	group  *procgroup.Group // keeper's process group
	exited chan struct{}    // closed when keeper exited
}

// NodeState is one node as the monitor reports it (pg_autoctl show
// state --json).
type NodeState struct {
	Name      string `json:"nodename"`
	Port      int    `json:"nodeport"`
	Reported  string `json:"current_group_state"`
	Assigned  string `json:"assigned_group_state"`
	Health    int    `json:"health"`
	LSN       string `json:"reported_lsn"`
	Timeline  int    `json:"reported_tli"`
	Quorum    bool   `json:"replication_quorum"`
	Candidate int    `json:"candidate_priority"`
}

// NewHACluster creates the monitor, tightens its health checks
// (HAMonitorSettings), creates NodeA (which becomes primary) and NodeB
// (its secondary, by pg_basebackup), starts their keepers and waits
// until the monitor reports NodeA primary and NodeB secondary. A
// t.Cleanup stops the keepers (and their servers) and deletes the
// directories.
//
// It skips t when pg_autoctl or the PostgreSQL binaries are missing,
// unless IDEM_REQUIRE_POSTGRES=1 (RequireEnv), and fails t when the
// formation cannot be built.
func NewHACluster(t testing.TB, sync bool) *HACluster {
	t.Helper()
	h, err := startHA(sync)
	return started(t, h, err)
}

// startHA builds the formation; on failure nothing is left running.
func startHA(syncRep bool) (_ *HACluster, err error) {
	autoctl, err := exec.LookPath(cmp.Or(os.Getenv(AutoctlEnv), "pg_autoctl"))
	if err != nil {
		return nil, fmt.Errorf("%w (pg_autoctl: %v; install postgresql-15-auto-failover)", errNoBinaries, err)
	}
	h := &HACluster{Sync: syncRep, autoctl: autoctl, nodes: map[string]*haNode{}}
	defer func() {
		if err != nil {
			h.stop()
		}
	}()
	if h.monitor, err = h.newNode("monitor"); err != nil {
		return nil, err
	}
	m := h.monitor
	if err := m.autoctl(h.autoctl, "create", "monitor", "--pgdata", m.c.data, "--pgport", strconv.Itoa(m.c.port),
		"--pgctl", filepath.Join(m.c.bin, "pg_ctl"), "--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl"); err != nil {
		return nil, err
	}
	if err := m.start(h.autoctl); err != nil {
		return nil, err
	}
	// The monitor's keeper is up once it answers in its database.
	if err := poll(haFormWait, func() (bool, error) {
		_, err := m.c.output(false, "psql", "-X", "-At", "-h", "127.0.0.1", "-p", strconv.Itoa(m.c.port),
			"-U", "postgres", "-w", "-d", "pg_auto_failover", "-c", "select count(*) from pgautofailover.formation")
		return err == nil, err
	}); err != nil {
		return nil, fmt.Errorf("pgtest: the monitor: %w\n%s", err, m.logTail())
	}
	for name, v := range HAMonitorSettings {
		if _, err := m.c.query(fmt.Sprintf("alter system set %s = %d", name, v)); err != nil {
			return nil, err
		}
	}
	if _, err := m.c.query("select pg_reload_conf()"); err != nil {
		return nil, err
	}
	monitorURI := fmt.Sprintf("postgres://autoctl_node@127.0.0.1:%d/pg_auto_failover?sslmode=disable", m.c.port)
	for _, name := range []string{NodeA, NodeB} {
		n, err := h.newNode(name)
		if err != nil {
			return nil, err
		}
		h.nodes[name] = n
		// create initialises the node (NodeA: initdb; NodeB: a base
		// backup of NodeA, which needs NodeA's keeper running) and
		// registers it; run then supervises it.
		if err := n.autoctl(h.autoctl, "create", "postgres", "--pgdata", n.c.data, "--pgport", strconv.Itoa(n.c.port),
			"--pgctl", filepath.Join(n.c.bin, "pg_ctl"), "--hostname", "127.0.0.1", "--listen", "127.0.0.1",
			"--name", name, "--auth", "trust", "--no-ssl", "--monitor", monitorURI,
			"--replication-quorum", strconv.FormatBool(syncRep)); err != nil {
			return nil, err
		}
		if err := n.autoctl(h.autoctl, "config", "set", "--pgdata", n.c.data,
			"timeout.network_partition_timeout", strconv.Itoa(HAPartitionTimeout)); err != nil {
			return nil, err
		}
		n.c.log = filepath.Join(n.c.dir, "postgres.log")
		if err := n.c.appendConfig("max_connections = 200", "fsync = on", "synchronous_commit = on"); err != nil {
			return nil, err
		}
		if err := n.start(h.autoctl); err != nil {
			return nil, err
		}
		want := "single"
		if name == NodeB {
			want = "secondary"
		}
		if err := h.WaitState(haFormWait, name, want); err != nil {
			return nil, err
		}
	}
	if err := h.WaitState(haFormWait, NodeA, "primary", NodeB, "secondary"); err != nil {
		return nil, err
	}
	return h, nil
}

// newNode prepares a node's directory (newCluster: owned by the server
// user, reaped if this test binary dies) with a free port; its PGDATA
// does not exist yet.
func (h *HACluster) newNode(name string) (*haNode, error) {
	c, err := newCluster()
	if err != nil {
		return nil, err
	}
	if c.port, err = freePort(); err != nil {
		os.RemoveAll(c.dir)
		return nil, err
	}
	xdg := filepath.Join(c.dir, "xdg")
	env := append(cleanEnv(), "PATH="+c.bin+":/usr/bin:/bin", "HOME="+c.dir,
		"XDG_CONFIG_HOME="+filepath.Join(xdg, "config"), "XDG_DATA_HOME="+filepath.Join(xdg, "data"),
		"XDG_RUNTIME_DIR="+filepath.Join(xdg, "run"))
	c.log = filepath.Join(c.dir, "pg_autoctl.log")
	return &haNode{name: name, c: c, env: env}, nil
}

// Ports returns NodeA's and NodeB's TCP ports on 127.0.0.1.
func (h *HACluster) Ports() (a, b int) { return h.nodes[NodeA].c.port, h.nodes[NodeB].c.port }

// MonitorPort is the monitor's TCP port on 127.0.0.1.
func (h *HACluster) MonitorPort() int { return h.monitor.c.port }

// DSN creates the database db on the current primary (it replicates to
// the secondary) and returns the multi-host connection string of both
// nodes, NodeA first:
//
//	postgres://postgres@127.0.0.1:PA,127.0.0.1:PB/db?sslmode=disable&target_session_attrs=read-write&connect_timeout=2
//
// A client keeps the first host that accepts writes, whichever node the
// monitor made primary. db must be a plain identifier.
func (h *HACluster) DSN(db string) (string, error) {
	p, err := h.Primary()
	if err != nil {
		return "", err
	}
	if err := h.nodes[p].c.client("createdb", "--", db); err != nil {
		return "", err
	}
	// Until the secondary has replayed the createdb, a client that
	// tries it first gets FATAL "database does not exist" there and
	// gives up instead of trying the next host.
	for _, n := range h.nodes {
		q := "select count(*) from pg_database where datname = '" + db + "'"
		if err := n.c.await(q, "1", haFormWait); err != nil {
			return "", err
		}
	}
	a, b := h.Ports()
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/%s?sslmode=disable&target_session_attrs=read-write&connect_timeout=2",
		a, b, db), nil
}

// NodeDSN is the connection string of name's postgres database alone,
// for probes (read-write sessions only: target_session_attrs).
func (h *HACluster) NodeDSN(name string) string {
	port := 0
	if n, ok := h.nodes[name]; ok {
		port = n.c.port
	}
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=1", port)
}

// State returns what the monitor reports of every node (pg_autoctl show
// state --json), in node order.
func (h *HACluster) State() ([]NodeState, error) {
	out, err := h.monitor.output(h.autoctl, "show", "state", "--pgdata", h.monitor.c.data, "--json")
	if err != nil {
		return nil, err
	}
	var s []NodeState
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		return nil, fmt.Errorf("pgtest: pg_autoctl show state --json: %w: %q", err, out)
	}
	return s, nil
}

// StateText is pg_autoctl show state's table, for logs and reports.
func (h *HACluster) StateText() string {
	out, err := h.monitor.output(h.autoctl, "show", "state", "--pgdata", h.monitor.c.data)
	if err != nil {
		return err.Error()
	}
	return strings.TrimRight(out, "\n")
}

// Events is the monitor's last count events (pg_autoctl show events):
// every state it assigned and every report, with its reason.
func (h *HACluster) Events(count int) string {
	out, err := h.monitor.output(h.autoctl, "show", "events", "--pgdata", h.monitor.c.data, "--count", strconv.Itoa(count))
	if err != nil {
		return err.Error()
	}
	return strings.TrimRight(out, "\n")
}

// Replication is what the primary name runs with: its
// synchronous_standby_names and, for every standby in its
// pg_stat_replication, "application_name:state:sync_state".
func (h *HACluster) Replication(name string) (string, error) {
	n, err := h.node(name)
	if err != nil {
		return "", err
	}
	return n.c.query("select coalesce(current_setting('synchronous_standby_names'), '') || ' / ' || " +
		"coalesce((select string_agg(application_name || ':' || state || ':' || sync_state, ',') from pg_stat_replication), 'no standby')")
}

// Primary returns the name of the node the monitor reports, and
// assigns, as primary; an error if there is none.
func (h *HACluster) Primary() (string, error) {
	s, err := h.State()
	if err != nil {
		return "", err
	}
	for _, n := range s {
		if n.Reported == "primary" && n.Assigned == "primary" {
			return n.Name, nil
		}
	}
	return "", fmt.Errorf("pgtest: no primary: %+v", s)
}

// WaitState polls the monitor until, for every name/state pair of
// pairs, the node reports that state and is assigned it, or timeout
// passes (then the error holds the last report).
func (h *HACluster) WaitState(timeout time.Duration, pairs ...string) error {
	if len(pairs)%2 != 0 {
		return errors.New("pgtest: WaitState wants name/state pairs")
	}
	err := pollWith(timeout, haStatePoll, func() (bool, error) {
		s, err := h.State()
		if err != nil {
			return false, err
		}
		for i := 0; i < len(pairs); i += 2 {
			ok := false
			for _, n := range s {
				ok = ok || n.Name == pairs[i] && n.Reported == pairs[i+1] && n.Assigned == pairs[i+1]
			}
			if !ok {
				return false, fmt.Errorf("want %v, the monitor reports %+v", pairs, s)
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("%w\n%s", err, h.logTails())
	}
	return nil
}

// WaitPromoted polls the monitor until it reports name as a primary —
// "wait_primary" (promoted, accepting writes, its standby not back yet:
// pg_auto_failover then commits without waiting for one) or "primary"
// — or timeout passes.
func (h *HACluster) WaitPromoted(timeout time.Duration, name string) error {
	err := pollWith(timeout, haStatePoll, func() (bool, error) {
		s, err := h.State()
		if err != nil {
			return false, err
		}
		for _, n := range s {
			if n.Name == name && (n.Reported == "wait_primary" || n.Reported == "primary") {
				return true, nil
			}
		}
		return false, fmt.Errorf("want %s promoted, the monitor reports %+v", name, s)
	})
	if err != nil {
		return fmt.Errorf("%w\n%s", err, h.logTails())
	}
	return nil
}

// logTails is the end of every keeper's log, for errors.
func (h *HACluster) logTails() string {
	var b strings.Builder
	for _, n := range append([]*haNode{h.monitor}, h.nodes[NodeA], h.nodes[NodeB]) {
		if n != nil {
			fmt.Fprintf(&b, "--- %s: %s ---\n%s\n", n.name, n.c.log, n.logTail())
		}
	}
	return b.String()
}
