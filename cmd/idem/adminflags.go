package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/secretfile"
)

// adminFlags are the flags of the admin listener of "idem serve".
type adminFlags struct {
	addr, operators *string
	hosts           hostList
	tlsCert, tlsKey *string
}

// hostList is a repeatable --admin-host flag.
type hostList []string

func (h *hostList) String() string { return strings.Join(*h, ",") }
func (h *hostList) Set(s string) error {
	for _, name := range strings.Split(s, ",") {
		name = strings.ToLower(strings.TrimSpace(name))
		if name == "" || strings.ContainsAny(name, "/ @") {
			return fmt.Errorf("%q is not a host name", s)
		}
		*h = append(*h, strings.Trim(name, "[]"))
	}
	return nil
}

func addAdminFlags(fs *flag.FlagSet) *adminFlags {
	f := &adminFlags{
		addr:      fs.String("admin-addr", "", "serve GET /metrics and, with --operators, the operator console on `ADDR` (host:port; port 0 picks a free one); off by default (docs/console.md)"),
		operators: fs.String("operators", "", "operators `FILE` of the console: {\"<token>\": {\"name\": \"alice\", \"show_responses\": false}}; not API tokens; needs --admin-addr"),
		tlsCert:   fs.String("admin-tls-cert", "", "serve the admin listener over TLS with this certificate `FILE` (PEM; with --admin-tls-key)"),
		tlsKey:    fs.String("admin-tls-key", "", "the private key `FILE` of --admin-tls-cert (PEM, mode 0600)"),
	}
	fs.Var(&f.hosts, "admin-host", "also answer the admin listener for Host `NAME` (repeatable, or comma-separated); by default only the --admin-addr host and localhost names")
	return f
}

// check reports a usage error of the admin flags.
func (f *adminFlags) check() error {
	switch {
	case *f.operators != "" && *f.addr == "":
		return errors.New("--operators needs --admin-addr: the console is served on the admin listener")
	case (*f.tlsCert == "") != (*f.tlsKey == ""):
		return errors.New("--admin-tls-cert and --admin-tls-key go together")
	case *f.addr == "" && (*f.tlsCert != "" || len(f.hosts) > 0):
		return errors.New("--admin-tls-cert, --admin-tls-key and --admin-host need --admin-addr")
	}
	return nil
}

// tlsConfig loads the certificate and key: nil without them. The key
// file is a secret file (internal/secretfile).
func (f *adminFlags) tlsConfig() (*tls.Config, error) {
	if *f.tlsCert == "" {
		return nil, nil
	}
	// The key is read once, from the file whose mode was checked (no
	// check-then-reopen gap).
	key, err := secretfile.Read(*f.tlsKey, "TLS key file", 1<<16)
	if err != nil {
		return nil, err
	}
	certPEM, err := os.ReadFile(*f.tlsCert)
	if err != nil {
		return nil, fmt.Errorf("admin TLS certificate: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, key)
	if err != nil {
		return nil, fmt.Errorf("admin TLS certificate: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// allowedHosts are the Host names the admin listener answers: the host of
// --admin-addr (unless a wildcard), the bound address's IP, "localhost",
// 127.0.0.1 and ::1, and every --admin-host.
func (f *adminFlags) allowedHosts(bound net.Addr) map[string]bool {
	return allowedHosts(*f.addr, bound, f.hosts)
}

// allowedHosts are the Host names a listener on addr, bound at bound,
// answers: addr's host (unless a wildcard), the bound IP, "localhost",
// 127.0.0.1, ::1 and extra.
func allowedHosts(addr string, bound net.Addr, extra []string) map[string]bool {
	allowed := map[string]bool{"localhost": true, "127.0.0.1": true, "::1": true}
	if host, _, err := net.SplitHostPort(addr); err == nil && host != "" {
		if ip := net.ParseIP(host); ip == nil || !ip.IsUnspecified() {
			allowed[strings.ToLower(host)] = true
		}
	}
	if tcp, ok := bound.(*net.TCPAddr); ok && !tcp.IP.IsUnspecified() {
		allowed[tcp.IP.String()] = true
	}
	for _, h := range extra {
		allowed[h] = true
	}
	return allowed
}

// isLoopback reports whether the host of addr is a loopback address or
// "localhost".
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// CodeHostNotAllowed: a request to the admin listener named a Host it
// does not answer for (a DNS-rebinding page, a wrong name).
const CodeHostNotAllowed = "HOST_NOT_ALLOWED"

// hostGuard answers only requests whose Host names an allowed host (the
// port is not looked at): a web page that rebinds its own DNS name to a
// loopback address still sends its own name, and is refused, so it can
// reach neither the console nor /metrics. Others get 421 Misdirected
// Request, problem+json HOST_NOT_ALLOWED.
type hostGuard struct{ allowed map[string]bool }

// allows reports whether the Host header value host is allowed.
func (g hostGuard) allows(host string) bool {
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	}
	name = strings.TrimSuffix(strings.ToLower(strings.Trim(name, "[]")), ".")
	return name != "" && g.allowed[name]
}

// Handler wraps next with the check.
func (g hostGuard) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.allows(r.Host) {
			idemhttp.Problem{Status: http.StatusMisdirectedRequest, Code: CodeHostNotAllowed,
				Detail: "This admin listener does not answer for that Host; add the name with --admin-host if it is yours."}.Write(w)
			return
		}
		next.ServeHTTP(w, r)
	})
}
