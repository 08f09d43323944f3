package idemhttp

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// TestFramerSplits: the framer reads a stream of pipelined requests —
// Content-Length bodies (one holding the framing fields' text), chunked
// bodies with extensions and trailers, empty lines between requests —
// the same however the stream is cut into reads (byte by byte, and 500
// random cuttings, the seed logged): a clean stream passes unchanged, and
// a stream with a conflicting request gets conflictLine right after that
// request's second framing field and nowhere else. Without the chunked
// and Content-Length framing, the body text would be taken for a head.
// threat:cl-te-smuggling
func TestFramerSplits(t *testing.T) {
	t.Parallel()
	look := "x\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n"
	clean := "POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: " + itoa(len(look)) + "\r\n\r\n" + look +
		"POST /b HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: Chunked\r\nX: 1\r\n continued\r\n\r\n" +
		"3;ext=\"a;b\"\r\nabc\r\n" + itoa16(len(look)) + "\r\n" + look + "\r\n0\r\nT: 1\r\n\r\n" +
		"\r\nGET /c HTTP/1.0\r\nContent-Length: 0\r\n\r\n" +
		"POST /g HTTP/1.1\r\nTransfer-Encoding:\r\n chunked\r\n\r\n" + itoa16(len(look)) + "\r\n" + look + "\r\n0\r\n\r\n" +
		"POST /d HTTP/1.1\n\rHost: h\nContent-Length: 1\n\nz"
	conflictHead := "POST /e HTTP/1.1\r\nHost: h\r\ncontent-length: 1\r\nX: Transfer-Encoding\r\nTRANSFER-ENCODING: chunked\r\n"
	conflictRest := "\r\n0\r\n\r\nGET /f HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n"
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	for _, c := range []struct {
		name, in, want string
		injected       bool
	}{
		{"clean", clean, clean, false},
		{"conflict", clean + conflictHead + conflictRest, clean + conflictHead + conflictLine + conflictRest, true},
	} {
		for try := range 501 {
			f := newFramer()
			var out []byte
			for rest := c.in; rest != ""; {
				n := 1
				if try > 0 {
					n = 1 + rng.IntN(40)
				}
				n = min(n, len(rest))
				out = f.feed(out, []byte(rest[:n]))
				rest = rest[n:]
			}
			if string(out) != c.want || f.injected != c.injected {
				t.Fatalf("%s, cutting %d: injected %v, got\n%q\nwant\n%q", c.name, try, f.injected, out, c.want)
			}
			if !c.injected && (f.off || f.state != fsHead || !f.first) {
				t.Fatalf("%s, cutting %d: the framer ended off %v in state %d, not before a head", c.name, try, f.off, f.state)
			}
		}
	}
}

func itoa(n int) string   { return strconv.Itoa(n) }
func itoa16(n int) string { return strconv.FormatInt(int64(n), 16) }
