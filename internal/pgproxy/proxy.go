// Package pgproxy is a TCP proxy between a PostgreSQL client and server,
// for the fault suite: it forwards the wire protocol unchanged and, when
// armed, cuts a connection right after PostgreSQL has answered a COMMIT —
// the transaction is committed, but the client never hears so. That is
// the "dropped commit reply" of SPEC V1: the client cannot tell whether
// its commit happened and must find out by reading the database again.
//
// Only TCP without TLS is supported: the client must connect with
// sslmode=disable (pgtest's DSNs do). A client that asks for TLS anyway
// is told "no" on the proxy's behalf, as a server without TLS would.
//
// A Proxy is safe for concurrent use. Close stops it and closes every
// connection it holds.
//
// The protocol handling is hand-written on purpose: the proxy needs only
// the framing (a type byte and a length) and the layouts of four messages
// (Query, Parse, Bind, CommandComplete), and must forward every byte
// unchanged. pgx's pgproto3 decodes messages into values and encodes them
// again, which needs the authentication state of both ends and does not
// promise byte-identical forwarding.
package pgproxy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
)

// Proxy forwards connections from its listener to one PostgreSQL server.
// Make one with Listen.
type Proxy struct {
	ln       net.Listener
	upstream string

	mu       sync.Mutex
	armed    string // cut after the COMMIT of a transaction whose SQL contains this; "" disarmed
	downNext bool   // the armed cut also takes the proxy down (CutCommitOfThenDown)
	down     bool   // an outage: new connections are refused (closed at once)
	cuts     []Cut
	conns    map[net.Conn]struct{}
	closed   bool
	cutCh    chan Cut
	refused  chan struct{}
	wg       sync.WaitGroup
}

// Cut describes one connection cut after a COMMIT reply.
type Cut struct {
	// Statement is the SQL text of the transaction that matched the armed
	// substring (the first matching statement).
	Statement string
}

// Listen starts a proxy on a free port of 127.0.0.1 that forwards to
// upstream ("host:port").
func Listen(upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, upstream: upstream, conns: map[net.Conn]struct{}{}, cutCh: make(chan Cut, 16), refused: make(chan struct{}, 64)}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listening address, "127.0.0.1:PORT".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// CutCommitOf arms the proxy once: the next COMMIT that completes on a
// connection whose current transaction sent a statement containing
// substr (case-sensitive, as the client sent it) has its reply withheld,
// and both sides of that connection are closed at once. The COMMIT has
// then been executed by PostgreSQL; only its answer is lost. Later
// COMMITs pass until the proxy is armed again. "" disarms it.
func (p *Proxy) CutCommitOf(substr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed, p.downNext = substr, false
}

// CutCommitOfThenDown arms the proxy as CutCommitOf does, and the cut
// also starts an outage, in the same step: every connection the proxy
// holds is closed and every new one is refused (accepted and closed at
// once, as a host whose database server died) until Up. That is a
// primary lost right after it committed: the client learns nothing of
// its commit and cannot read it back until the database is reachable
// again.
func (p *Proxy) CutCommitOfThenDown(substr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed, p.downNext = substr, substr != ""
}

// Up ends an outage: new connections are forwarded again.
func (p *Proxy) Up() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
}

// Refused returns a channel that receives one value per connection
// refused during an outage (it buffers 64; later ones are dropped).
func (p *Proxy) Refused() <-chan struct{} { return p.refused }

// Cuts returns a channel that receives every cut as it happens (it
// buffers 16; later cuts are dropped from the channel but still counted
// by Done).
func (p *Proxy) Cuts() <-chan Cut { return p.cutCh }

// Done returns the cuts made so far.
func (p *Proxy) Done() []Cut {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Cut(nil), p.cuts...)
}

// Close stops listening, closes every proxied connection and waits for
// the proxy's goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.refuse(client) {
			continue
		}
		server, err := net.Dial("tcp", p.upstream)
		if err != nil {
			client.Close()
			continue
		}
		if !p.track(client, server) {
			client.Close()
			server.Close()
			return
		}
		c := &conn{p: p, client: client, server: server, stmts: map[string]string{}}
		p.wg.Add(2)
		go func() { defer p.wg.Done(); c.frontend() }()
		go func() { defer p.wg.Done(); c.backend() }()
	}
}

// refuse closes client and reports true during an outage.
func (p *Proxy) refuse(client net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.down {
		return false
	}
	client.Close()
	select {
	case p.refused <- struct{}{}:
	default:
	}
	return true
}

func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}

// takeCut consumes the armed substring if the transaction's statement
// matches it.
func (p *Proxy) takeCut(stmt string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.armed == "" || !strings.Contains(stmt, p.armed) {
		return false
	}
	p.armed = ""
	if p.downNext {
		p.downNext, p.down = false, true
		for c := range p.conns {
			c.Close() // the caller's own connection too: its reply is withheld anyway
		}
	}
	cut := Cut{Statement: stmt}
	p.cuts = append(p.cuts, cut)
	select {
	case p.cutCh <- cut:
	default:
	}
	return true
}

// conn is one proxied connection.
type conn struct {
	p              *Proxy
	client, server net.Conn

	mu    sync.Mutex
	stmts map[string]string // prepared statement name → SQL text (Parse)
	txSQL []string          // SQL of the current transaction's statements
}

func (c *conn) close() {
	c.client.Close()
	c.server.Close()
	c.p.untrack(c.client, c.server)
}

// frontend copies client → server, noting the SQL each message runs.
func (c *conn) frontend() {
	defer c.close()
	tlsAsked, err := forwardStartup(c.client, c.server)
	for err == nil && tlsAsked {
		// Refuse TLS (and GSS encryption) ourselves, as a server without
		// it would; the client then sends its real startup message.
		if _, err = c.client.Write([]byte{'N'}); err == nil {
			tlsAsked, err = forwardStartup(c.client, c.server)
		}
	}
	for err == nil {
		var m message
		if m, err = readMessage(c.client); err != nil {
			return
		}
		c.note(m)
		_, err = c.server.Write(m.raw)
	}
}

// note records the SQL text a frontend message carries or names.
func (c *conn) note(m message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch m.typ {
	case 'Q': // Query: the SQL text
		c.txSQL = append(c.txSQL, cString(m.body))
	case 'P': // Parse: statement name, SQL text, …
		name, rest := cutCString(m.body)
		c.stmts[name] = cString(rest)
		c.txSQL = append(c.txSQL, c.stmts[name])
	case 'B': // Bind: portal name, statement name, …
		_, rest := cutCString(m.body)
		name, _ := cutCString(rest)
		c.txSQL = append(c.txSQL, c.stmts[name])
	}
}

// backend copies server → client, withholding a COMMIT's CommandComplete
// when the proxy is armed for its transaction.
func (c *conn) backend() {
	defer c.close()
	for {
		m, err := readMessage(c.server)
		if err != nil {
			return
		}
		switch {
		case m.typ == 'C' && cString(m.body) == "COMMIT": // CommandComplete with its tag
			c.mu.Lock()
			sql := strings.Join(c.txSQL, "; ")
			c.txSQL = nil
			c.mu.Unlock()
			if c.p.takeCut(sql) {
				return // the reply is dropped, both sides closed
			}
		case m.typ == 'Z' && len(m.body) == 1 && m.body[0] == 'I':
			// ReadyForQuery, idle: no transaction is open (after a
			// ROLLBACK or a statement outside a transaction), so the
			// statements noted so far belong to no later COMMIT. The
			// client sends its next query only after this message, so
			// nothing of the next transaction is noted yet.
			c.mu.Lock()
			c.txSQL = nil
			c.mu.Unlock()
		}
		if _, err := c.client.Write(m.raw); err != nil {
			return
		}
	}
}

// errShort is returned for a message whose length field is impossible.
var errShort = errors.New("pgproxy: malformed message length")

// message is one typed protocol message: raw holds it whole (type byte,
// length, body), body only the payload.
type message struct {
	typ  byte
	raw  []byte
	body []byte
}

// readMessage reads one typed message (every message after the startup
// packet, both directions).
func readMessage(r io.Reader) (message, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return message{}, err
	}
	n := int(binary.BigEndian.Uint32(hdr[1:]))
	if n < 4 || n > 1<<30 {
		return message{}, errShort
	}
	raw := make([]byte, 1+n)
	copy(raw, hdr[:])
	if _, err := io.ReadFull(r, raw[5:]); err != nil {
		return message{}, err
	}
	return message{typ: hdr[0], raw: raw, body: raw[5:]}, nil
}

// Codes of the untyped startup packets that ask for encryption.
const (
	sslRequest    = 80877103
	gssEncRequest = 80877104
)

// forwardStartup forwards the untyped startup packet (length, code, …)
// unless it asks for TLS or GSS encryption, which it reports instead
// without forwarding.
func forwardStartup(client, server net.Conn) (encryptionAsked bool, err error) {
	var hdr [8]byte
	if _, err := io.ReadFull(client, hdr[:]); err != nil {
		return false, err
	}
	n := int(binary.BigEndian.Uint32(hdr[:4]))
	if n < 8 || n > 1<<20 {
		return false, errShort
	}
	if code := binary.BigEndian.Uint32(hdr[4:]); n == 8 && (code == sslRequest || code == gssEncRequest) {
		return true, nil
	}
	raw := make([]byte, n)
	copy(raw, hdr[:])
	if _, err := io.ReadFull(client, raw[8:]); err != nil {
		return false, err
	}
	_, err = server.Write(raw)
	return false, err
}

// cString returns b up to its first NUL.
func cString(b []byte) string {
	s, _ := cutCString(b)
	return s
}

// cutCString splits b after its first NUL-terminated string.
func cutCString(b []byte) (string, []byte) {
	s, rest, _ := bytes.Cut(b, []byte{0})
	return string(s), rest
}
