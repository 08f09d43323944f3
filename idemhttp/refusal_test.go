package idemhttp

import (
	"strings"
	"testing"
)

// TestRewriteRefusalStrict: only net/http's own refusals, byte for byte,
// are rewritten; anything else, however close, passes through.
// Proves threat:server-refusals-plain-text (docs/threat-model.md).
func TestRewriteRefusalStrict(t *testing.T) {
	const h = serverErrorHeaders
	rewritten := map[string]string{
		"HTTP/1.1 400 Bad Request" + h + "400 Bad Request":                                                             "MALFORMED_REQUEST",
		"HTTP/1.1 400 Bad Request: missing required Host header" + h + "400 Bad Request: missing required Host header": "MALFORMED_REQUEST",
		"HTTP/1.1 431 Request Header Fields Too Large" + h + "431 Request Header Fields Too Large":                     "HEADERS_TOO_LARGE",
		"HTTP/1.1 501 Not Implemented" + h + "Unsupported transfer encoding":                                           "UNSUPPORTED_TRANSFER_ENCODING",
		"HTTP/1.1 505 HTTP Version Not Supported: unsupported protocol version" + h +
			"505 HTTP Version Not Supported: unsupported protocol version": "HTTP_VERSION_UNSUPPORTED",
	}
	for in, code := range rewritten {
		out, ok := rewriteRefusal([]byte(in), false)
		if !ok || !strings.Contains(string(out), `"code":"`+code+`"`) ||
			!strings.HasPrefix(string(out), in[:len("HTTP/1.1 400")]) ||
			!strings.Contains(string(out), "\r\nContent-Type: application/problem+json\r\n") ||
			!strings.Contains(string(out), "\r\nConnection: close\r\n\r\n{") {
			t.Errorf("%q: %v %q; want a problem with %s", in, ok, out, code)
		}
	}
	kept := []string{
		"HTTP/1.1 400 Bad Request" + h + "400 Bad Request\n",              // trailing byte
		"HTTP/1.1 400 Bad Request" + h + "400 Bad Request400 Bad Request", // more after the body
		"HTTP/1.1 400 Bad Request" + h + "Bad Request",                    // another body
		"HTTP/1.1 400 Bad Request" + h,                                    // no body
		"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nDate: x\r\nConnection: close\r\n\r\n400 Bad Request",
		"HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n400 Bad Request",
		"HTTP/1.0 400 Bad Request" + h + "400 Bad Request",               // another version
		"HTTP/1.1 400 Bad request" + h + "400 Bad request",               // another reason phrase
		"HTTP/1.1 409 Conflict" + h + "409 Conflict",                     // a status net/http never refuses with
		"HTTP/1.1 501 Not Implemented" + h + "501 Not Implemented: nope", // another 501 body
		"HTTP/1.1 400 Bad Request: \x01" + h + "400 Bad Request: \x01",   // unprintable text
		" HTTP/1.1 400 Bad Request" + h + " HTTP/1.1 400 Bad Request",    // not at the start
		"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
	}
	for _, in := range kept {
		if out, ok := rewriteRefusal([]byte(in), false); ok {
			t.Errorf("%q was rewritten to %q", in, out)
		}
	}
}
