// Package myproxy is a TCP proxy between a MySQL/MariaDB client and
// server, for the fault suite, as internal/pgproxy is for PostgreSQL: it
// forwards the client/server protocol unchanged and, when armed, cuts a
// connection right after the server has answered a COMMIT — the
// transaction is committed, but the client never hears so (the "dropped
// commit reply" of SPEC V1).
//
// Only TCP without TLS or compression is supported (go-sql-driver/mysql's
// defaults, which idemmysql keeps). The proxy reads only the framing of
// the protocol (a 3-byte length and a sequence number per packet) and the
// text of the commands that carry SQL (COM_QUERY, COM_STMT_PREPARE); every
// byte is forwarded as it came.
//
// A Proxy is safe for concurrent use. Close stops it and closes every
// connection it holds.
package myproxy

import (
	"bytes"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
)

// Command bytes of the packets the proxy reads.
const (
	comQuery       = 0x03
	comStmtPrepare = 0x16
)

// Proxy forwards connections from its listener to one server. Make one
// with Listen.
type Proxy struct {
	ln       net.Listener
	upstream string

	mu     sync.Mutex
	armed  string // cut after the COMMIT of a transaction whose SQL contains this; "" disarmed
	conns  map[net.Conn]struct{}
	closed bool
	cutCh  chan string
	wg     sync.WaitGroup
}

// Listen starts a proxy on a free port of 127.0.0.1 that forwards to
// upstream ("host:port").
func Listen(upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, upstream: upstream, conns: map[net.Conn]struct{}{}, cutCh: make(chan string, 16)}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listening address, "127.0.0.1:PORT".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// CutCommitOf arms the proxy once: the next COMMIT sent on a connection
// whose current transaction sent a statement containing substr
// (case-sensitive) has its reply withheld, and both sides of that
// connection are closed as soon as the reply arrives — the server has
// then executed the COMMIT; only its answer is lost. "" disarms it.
func (p *Proxy) CutCommitOf(substr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed = substr
}

// Cuts returns a channel that receives, for every cut, the first
// statement of its transaction that matched (it buffers 16).
func (p *Proxy) Cuts() <-chan string { return p.cutCh }

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
		server, err := net.Dial("tcp", p.upstream)
		if err != nil {
			client.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			client.Close()
			server.Close()
			return
		}
		p.conns[client], p.conns[server] = struct{}{}, struct{}{}
		p.mu.Unlock()
		c := &conn{p: p, client: client, server: server}
		p.wg.Add(2)
		go c.frontend()
		go c.backend()
	}
}

// conn is one proxied connection.
type conn struct {
	p              *Proxy
	client, server net.Conn
	matched        string      // frontend only: the matching statement of the current transaction
	cutting        atomic.Bool // the COMMIT to cut was sent: withhold the server's next packet
	cut            string      // the statement the cut is for, set before cutting
	once           sync.Once
}

func (c *conn) close() {
	c.once.Do(func() {
		c.client.Close()
		c.server.Close()
		c.p.mu.Lock()
		delete(c.p.conns, c.client)
		delete(c.p.conns, c.server)
		c.p.mu.Unlock()
	})
}

// frontend forwards the client's packets, noting the SQL of commands (a
// packet with sequence number 0 starts a command).
func (c *conn) frontend() {
	defer c.p.wg.Done()
	defer c.close()
	for {
		pkt, err := readPacket(c.client)
		if err != nil {
			return
		}
		if pkt[3] == 0 && len(pkt) > 4 && (pkt[4] == comQuery || pkt[4] == comStmtPrepare) {
			c.note(pkt[4], string(pkt[5:]))
		}
		if _, err := c.server.Write(pkt); err != nil {
			return
		}
	}
}

// note follows the transaction of the connection: a statement holding the
// armed text marks it; its COMMIT is cut if the proxy is still armed.
func (c *conn) note(cmd byte, sql string) {
	word := strings.ToUpper(strings.TrimSpace(sql))
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	switch {
	case cmd == comQuery && word == "COMMIT":
		if c.matched != "" && c.p.armed != "" && strings.Contains(c.matched, c.p.armed) {
			c.p.armed = ""
			c.cut = c.matched
			c.cutting.Store(true)
		}
		c.matched = ""
	case cmd == comQuery && word == "ROLLBACK":
		c.matched = ""
	case c.matched == "" && c.p.armed != "" && strings.Contains(sql, c.p.armed):
		c.matched = sql
	}
}

// backend forwards the server's packets; once the COMMIT to cut was
// sent, the next packet is its answer: withheld, and the connection
// closed.
func (c *conn) backend() {
	defer c.p.wg.Done()
	defer c.close()
	for {
		pkt, err := readPacket(c.server)
		if err != nil {
			return
		}
		if c.cutting.Load() {
			c.close()
			select {
			case c.p.cutCh <- c.cut:
			default:
			}
			return
		}
		if _, err := c.client.Write(pkt); err != nil {
			return
		}
	}
}

// readPacket reads one packet: a 3-byte little-endian payload length, a
// sequence number and the payload, returned whole.
func readPacket(r io.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := int(hdr[0]) | int(hdr[1])<<8 | int(hdr[2])<<16
	var b bytes.Buffer
	b.Grow(4 + n)
	b.Write(hdr[:])
	if _, err := io.CopyN(&b, r, int64(n)); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
