package idemhttp

import (
	"bytes"
	"strconv"
	"strings"
)

// conflictLine is the header line the framer puts into a request head
// that carries both Content-Length and Transfer-Encoding: a line without a
// colon, which net/http refuses as a malformed header (400) before it
// reads any of the body, and closes the connection after.
const conflictLine = "Idem-Conflicting-Framing\r\n"

// framer follows the HTTP/1.x requests a client sends on one connection,
// byte for byte as net/http frames them — a head of lines up to an empty
// line, then a body of Content-Length bytes or a chunked body with its
// trailer — in order to find every head that carries both Content-Length
// and Transfer-Encoding. RFC 9112 §6.3: such a message may be an attempt
// at request smuggling, and a server must close the connection after
// answering it, or refuse it; net/http serves it (Transfer-Encoding wins)
// and keeps the connection open. The framer refuses it: it adds
// conflictLine to that head, so net/http answers 400 and closes the
// connection, and problemConn rewrites that answer into 400
// MALFORMED_REQUEST.
//
// It forwards every byte as it comes and holds nothing back. Wherever it
// could read the stream differently from net/http — an unparsable
// Content-Length or chunk size, several Transfer-Encoding lines, an
// unsupported coding, a version other than HTTP/1.x, bytes that are not
// HTTP at all (a TLS handshake) — net/http either refuses the request and
// closes the connection or stops speaking HTTP/1.x on it, and the framer
// stops looking (off): from then on the bytes pass unchanged. A CONNECT
// or an Upgrade is no such point: net/http serves it as any request
// unless a handler takes the connection over, so the framer goes on (a
// client could otherwise switch the check off with one Upgrade line); on
// a connection a handler did take over, another protocol's bytes fail the
// next request line's check and the framer stops there.
type framer struct {
	off      bool
	state    int
	line     []byte // the current line, up to maxLine bytes
	long     bool   // the current line is longer than maxLine
	first    bool   // the next line of a head is its request line
	started  bool   // a byte of the connection was seen
	http11   bool   // the request is HTTP/1.1 or later: Transfer-Encoding counts
	cl       string // the Content-Length value, "" if none
	hasCL    bool
	te       int    // Transfer-Encoding lines
	teValue  string // the last Transfer-Encoding value, continued lines joined
	last     string // the name of the last field, lower case, for continued lines
	injected bool   // conflictLine was added to a head
	left     uint64
}

// framer states.
const (
	fsHead      = iota // reading the lines of a head
	fsBody             // left bytes of a Content-Length body
	fsChunkSize        // reading a chunk-size line
	fsChunkData        // left bytes of a chunk
	fsChunkEnd         // left bytes of the CRLF after a chunk
	fsTrailer          // reading trailer lines
)

// maxLine bounds the part of a line the framer keeps: longer lines are
// longer than anything it needs to read (net/http refuses chunk-size
// lines over 4 KiB; a header line this long only matters if it is one
// of the framing fields, whose values are short).
const maxLine = 8 << 10

func newFramer() *framer { return &framer{first: true} }

// feed appends p to out, with conflictLine where it belongs, and returns
// out.
func (f *framer) feed(out, p []byte) []byte {
	if !f.started && len(p) > 0 {
		f.started = true
		if c := p[0]; !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c == '\r' || c == '\n') {
			f.off = true // not an HTTP/1.x request line (a TLS handshake, HTTP/2's preface is caught later)
		}
	}
	for len(p) > 0 && !f.off {
		switch f.state {
		case fsBody, fsChunkData, fsChunkEnd:
			n := uint64(len(p))
			if n > f.left {
				n = f.left
			}
			if f.state == fsChunkEnd && !bytes.HasPrefix([]byte("\r\n")[2-f.left:], p[:n]) {
				f.off = true // net/http refuses the body
				continue
			}
			out, p = append(out, p[:n]...), p[n:]
			f.left -= n
			if f.left == 0 {
				switch f.state {
				case fsBody:
					f.state, f.first = fsHead, true
				case fsChunkData:
					f.state, f.left = fsChunkEnd, 2
				default:
					f.state = fsChunkSize
				}
			}
		default: // a line
			i := bytes.IndexByte(p, '\n')
			if i < 0 {
				f.keep(p)
				out, p = append(out, p...), nil
				continue
			}
			f.keep(p[:i])
			out, p = append(out, p[:i+1]...), p[i+1:]
			out = f.endLine(out)
			f.line, f.long = f.line[:0], false
		}
	}
	if f.off {
		out = append(out, p...)
	}
	return out
}

// keep adds b to the current line, up to maxLine bytes.
func (f *framer) keep(b []byte) {
	if room := maxLine - len(f.line); len(b) > room {
		b, f.long = b[:room], true
	}
	f.line = append(f.line, b...)
}

// endLine handles the complete line f.line (without its LF) and returns
// out, with conflictLine appended when this line completed a conflict.
func (f *framer) endLine(out []byte) []byte {
	line := bytes.TrimSuffix(f.line, []byte("\r"))
	switch f.state {
	case fsChunkSize:
		size, ok := chunkSize(line)
		switch {
		case !ok || f.long:
			f.off = true
		case size == 0:
			f.state = fsTrailer
		default:
			f.state, f.left = fsChunkData, size
		}
		return out
	case fsTrailer:
		if len(line) == 0 {
			f.state, f.first = fsHead, true
		}
		return out
	}
	switch {
	case f.first && len(line) == 0:
		// Empty lines before a request line: net/http skips them after
		// a POST, or refuses the request.
	case f.first:
		f.startHead(line)
	case len(line) == 0:
		f.endHead()
	case line[0] == ' ' || line[0] == '\t':
		// A continued line (obs-fold): net/http joins it to the previous
		// field's value with one space.
		cont := string(bytes.Trim(line, " \t"))
		switch f.last {
		case "content-length":
			f.off = true // "5 5" and the like: net/http refuses it
		case "transfer-encoding":
			f.teValue = strings.Trim(f.teValue+" "+cont, " \t")
		}
	default:
		name, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.Trim(value, " \t")
		f.last = ""
		switch {
		case f.long && len(name) > 64:
		case bytes.EqualFold(name, []byte("Content-Length")):
			if f.hasCL && string(value) != f.cl {
				f.off = true // net/http refuses differing values
			}
			f.hasCL, f.cl, f.last = true, string(value), "content-length"
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			f.te++
			f.teValue, f.last = string(value), "transfer-encoding"
		}
		if f.hasCL && f.te > 0 && !f.off {
			// The request is refused: net/http answers it, unread,
			// and closes the connection.
			f.injected, f.off = true, true
			return append(out, conflictLine...)
		}
	}
	return out
}

// startHead reads a request line: method, target and version as net/http
// splits them.
func (f *framer) startHead(line []byte) {
	_, rest, _ := bytes.Cut(line, []byte(" "))
	_, proto, _ := bytes.Cut(rest, []byte(" "))
	if len(proto) != len("HTTP/1.1") || !bytes.HasPrefix(proto, []byte("HTTP/1.")) || proto[7] < '0' || proto[7] > '9' {
		f.off = true // net/http refuses it, or it is not HTTP/1.x
		return
	}
	f.first, f.http11 = false, proto[7] >= '1'
	f.hasCL, f.cl, f.te, f.teValue, f.last = false, "", 0, "", ""
}

// endHead decides how the body of the head just read is framed.
func (f *framer) endHead() {
	f.first = true
	switch {
	case f.te > 0 && f.http11:
		if f.te > 1 || !strings.EqualFold(f.teValue, "chunked") {
			f.off = true // 501
			return
		}
		f.state = fsChunkSize
	case f.hasCL:
		n, err := strconv.ParseUint(f.cl, 10, 63)
		if err != nil || f.cl == "" || f.cl[0] == '+' {
			f.off = true // 400
			return
		}
		if n > 0 {
			f.state, f.left = fsBody, n
		}
	}
}

// chunkSize reads a chunk-size line as net/http does: trailing white
// space and any extension after ';' dropped, then at most 16 hex digits.
func chunkSize(line []byte) (uint64, bool) {
	line = bytes.TrimRight(line, " \t\r\n")
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		line = line[:i]
	}
	if len(line) == 0 || len(line) > 16 {
		return 0, false
	}
	var n uint64
	for _, c := range line {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		n = n<<4 | uint64(c)
	}
	return n, true
}
