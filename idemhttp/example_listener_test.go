package idemhttp_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"

	"github.com/idemkit/idem/idemhttp"
)

// A server on a ProblemListener answers in problem+json even the requests
// net/http refuses before any handler runs, here a header value with a
// DEL byte.
func ExampleProblemListener() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	srv := &http.Server{Handler: http.NotFoundHandler(), MaxHeaderBytes: 64 << 10}
	go srv.Serve(idemhttp.ProblemListener(ln))
	defer srv.Close()

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		panic(err)
	}
	defer c.Close()
	io.WriteString(c, "POST /v1/payments HTTP/1.1\r\nHost: example\r\nX-Note: a\x7fb\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.Status, resp.Header.Get("Content-Type"))
	fmt.Println(string(body))
	// Output:
	// 400 Bad Request application/problem+json
	// {"type":"about:blank","title":"Bad Request","status":400,"code":"MALFORMED_REQUEST","detail":"the request line or a header field is malformed"}
}
