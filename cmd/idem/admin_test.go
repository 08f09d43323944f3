package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// adminLine matches the admin listener's line of "idem serve --admin-addr".
var adminLine = regexp.MustCompile(`msg="(?:admin|console) listening on ([^\s"]+)"`)

// adminAddr waits for s's admin line and returns its address.
func adminAddr(t *testing.T, s *server) string {
	t.Helper()
	s.logs.waitFor(t, func(l string) bool { return adminLine.MatchString(l) }, 30*time.Second, "the admin line")
	return adminLine.FindStringSubmatch(s.logs.String())[1]
}

// get sends GET url with Host host ("" for the URL's) through c.
func getHost(t *testing.T, c *http.Client, url, host string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if host != "" {
		req.Host = host
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 1<<16)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	var p struct{ Code string }
	json.Unmarshal([]byte(b.String()), &p)
	return resp.StatusCode, p.Code, b.String()
}

// TestServeAdminMetrics: GET /metrics is served on the admin listener and
// never on the API's port (404 there); the admin listener answers its own
// address, localhost names and --admin-host names, and refuses any other
// Host — a DNS-rebinding page's — with 421 HOST_NOT_ALLOWED.
// threat:metrics-on-api-port threat:admin-dns-rebinding
func TestServeAdminMetrics(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := startServe(t, "--db", "sqlite:"+filepath.Join(dir, "serve.db"), "--admin-addr", "127.0.0.1:0", "--admin-host", "admin.example.internal")
	admin := adminAddr(t, s)
	_, port, _ := net.SplitHostPort(admin)
	if resp, b := s.post(t, "demo", "key-1", `{"amount":"1","currency":"EUR","payee":"p"}`); resp.StatusCode != http.StatusCreated {
		t.Fatalf("service: %d %s", resp.StatusCode, b)
	}
	c := &http.Client{Timeout: 30 * time.Second}
	if code, pcode, _ := getHost(t, c, s.url+"/metrics", ""); code != http.StatusNotFound {
		t.Errorf("GET /metrics on the API's port: %d %s; want 404", code, pcode)
	}
	for _, host := range []string{"", "localhost:" + port, "LOCALHOST", "[::1]:" + port, "admin.example.internal:" + port} {
		if code, _, body := getHost(t, c, "http://"+admin+"/metrics", host); code != http.StatusOK || !strings.Contains(body, "idem_requests_total") {
			t.Errorf("GET /metrics on the admin listener, Host %q: %d; want 200 with idem_requests_total", host, code)
		}
	}
	for _, host := range []string{"evil.example:" + port, "evil.example", "localhost.evil.example", "127.0.0.1.nip.io:" + port} {
		if code, pcode, _ := getHost(t, c, "http://"+admin+"/metrics", host); code != http.StatusMisdirectedRequest || pcode != CodeHostNotAllowed {
			t.Errorf("Host %q: %d %q; want 421 %s", host, code, pcode, CodeHostNotAllowed)
		}
	}
	if code, pcode, _ := getHost(t, c, "http://"+admin+"/login", "evil.example"); code != http.StatusMisdirectedRequest {
		t.Errorf("another path with Host evil.example: %d %q; want 421", code, pcode)
	}
}

// selfSigned writes a certificate for 127.0.0.1 and its key (mode 0600)
// to dir and returns their paths and a pool that trusts it.
func selfSigned(t *testing.T, dir string) (cert, key string, pool *x509.CertPool) {
	t.Helper()
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "idem admin"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(k)
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	parsed, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(parsed)
	return cert, key, pool
}

// TestServeAdminTLS: with --admin-tls-cert and --admin-tls-key the admin
// listener speaks TLS only (a plain HTTP request gets no page); a key file
// others may read stops the server (exit 1); a non-loopback admin address
// without TLS logs a loud warning, and with TLS it does not.
// threat:admin-cleartext
func TestServeAdminTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cert, key, pool := selfSigned(t, dir)
	s := startServe(t, "--db", "sqlite:"+filepath.Join(dir, "a.db"), "--admin-addr", "127.0.0.1:0", "--admin-tls-cert", cert, "--admin-tls-key", key)
	admin := adminAddr(t, s)
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if code, _, body := getHost(t, c, "https://"+admin+"/metrics", ""); code != http.StatusOK || !strings.Contains(body, "go_goroutines") {
		t.Errorf("GET https /metrics: %d; want 200 with the metrics", code)
	}
	if code, _, body := getHost(t, &http.Client{Timeout: 30 * time.Second}, "http://"+admin+"/metrics", ""); code == http.StatusOK && strings.Contains(body, "go_goroutines") {
		t.Error("plain HTTP on the TLS admin listener served the metrics")
	}
	if !strings.Contains(s.logs.String(), "scheme=https") || strings.Contains(s.logs.String(), "WITHOUT TLS") {
		t.Errorf("TLS admin listener on loopback: want scheme=https and no warning:\n%s", s.logs)
	}
	s.stop(t)

	os.Chmod(key, 0o644)
	if code, stderr := serveExit(t, "--db", "sqlite:"+filepath.Join(dir, "b.db"), "--admin-addr", "127.0.0.1:0", "--admin-tls-cert", cert, "--admin-tls-key", key); code != exitRefused || !strings.Contains(stderr, "mode 0644") {
		t.Errorf("a 0644 TLS key: exit %d; want %d naming its mode:\n%s", code, exitRefused, stderr)
	}
	os.Chmod(key, 0o600)

	open := startServe(t, "--db", "sqlite:"+filepath.Join(dir, "c.db"), "--admin-addr", "0.0.0.0:0")
	adminAddr(t, open)
	if !strings.Contains(open.logs.String(), "ADMIN LISTENER WITHOUT TLS ON A NON-LOOPBACK ADDRESS") {
		t.Errorf("0.0.0.0 without TLS: no warning:\n%s", open.logs)
	}
	open.stop(t)
	tlsOpen := startServe(t, "--db", "sqlite:"+filepath.Join(dir, "d.db"), "--admin-addr", "0.0.0.0:0", "--admin-tls-cert", cert, "--admin-tls-key", key)
	adminAddr(t, tlsOpen)
	if strings.Contains(tlsOpen.logs.String(), "WITHOUT TLS") {
		t.Errorf("0.0.0.0 with TLS: warned:\n%s", tlsOpen.logs)
	}
	tlsOpen.stop(t)
}
