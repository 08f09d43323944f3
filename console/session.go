package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// cookieName is the session cookie's name.
const cookieName = "idem_console"

// sessionTTL is how long a session lasts after login.
const sessionTTL = 12 * time.Hour

// session is a logged-in operator.
type session struct {
	op     Operator
	cookie string // the cookie's value, which the CSRF token is bound to
	id     string // the session's ID in the live sessions
}

// sign returns the HMAC-SHA-256 of purpose|value under the handler's key,
// base64url without padding.
func (h *handler) sign(purpose, value string) string {
	m := hmac.New(sha256.New, h.key[:])
	m.Write([]byte(purpose + "|" + value))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// seal returns value with its signature for purpose: "b64(value).sig".
func (h *handler) seal(purpose, value string) string {
	v := base64.RawURLEncoding.EncodeToString([]byte(value))
	return v + "." + h.sign(purpose, v)
}

// unseal returns the value sealed for purpose, false when s is not one.
func (h *handler) unseal(purpose, s string) (string, bool) {
	v, sig, ok := strings.Cut(s, ".")
	if !ok || !hmac.Equal([]byte(sig), []byte(h.sign(purpose, v))) {
		return "", false
	}
	b, err := base64.RawURLEncoding.DecodeString(v)
	return string(b), err == nil
}

// newSessionCookie returns the cookie value of a new session for the
// operator whose token is tok, ending at until — the sealed
// "id|token fingerprint|name|unix seconds" — and records it as live.
func (h *handler) newSessionCookie(tok string, op Operator, until time.Time) string {
	var b [16]byte
	rand.Read(b[:])
	id := base64.RawURLEncoding.EncodeToString(b[:])
	h.sessions.add(id, op.Name, until, h.now())
	return h.seal("session", id+"|"+h.tokenPrint(tok)+"|"+op.Name+"|"+strconv.FormatInt(until.Unix(), 10))
}

// tokenPrint is a fingerprint of an operator token that names it in a
// cookie without revealing it: HMAC(key, "token|"+tok), truncated.
func (h *handler) tokenPrint(tok string) string { return h.sign("token", tok)[:22] }

// session returns the request's session, false when it has no valid one
// (missing, forged, expired, ended by a logout, or its operator's token
// is no longer in the operators file).
func (h *handler) session(r *http.Request) (session, bool) {
	c, err := r.Cookie(cookieName)
	if err != nil {
		return session{}, false
	}
	v, ok := h.unseal("session", c.Value)
	if !ok {
		return session{}, false
	}
	parts := strings.SplitN(v, "|", 3) // id, token print, then name|until
	if len(parts) != 3 {
		return session{}, false
	}
	id, print, rest := parts[0], parts[1], parts[2]
	i := strings.LastIndexByte(rest, '|') // a name may hold "|"; the expiry does not
	if i < 0 {
		return session{}, false
	}
	name, until := rest[:i], rest[i+1:]
	sec, err := strconv.ParseInt(until, 10, 64)
	if err != nil || !h.now().Before(time.Unix(sec, 0)) || !h.sessions.has(id) {
		return session{}, false
	}
	op, ok := h.operatorByPrint(print)
	if !ok || op.Name != name {
		return session{}, false
	}
	return session{op: op, cookie: c.Value, id: id}, true
}

// operatorByPrint returns the operator whose token has the fingerprint
// print in the current operators.
func (h *handler) operatorByPrint(print string) (Operator, bool) {
	for t, o := range *h.ops.Load() {
		if hmac.Equal([]byte(h.tokenPrint(t)), []byte(print)) {
			return o, true
		}
	}
	return Operator{}, false
}

// csrf returns the CSRF token of s: HMAC(key, "csrf|"+cookie value).
func (h *handler) csrf(s session) string {
	return h.sign("csrf", s.cookie)
}

// csrfOK reports whether the form's csrf field is s's token.
func (h *handler) csrfOK(r *http.Request, s session) bool {
	return hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(h.csrf(s)))
}

// operatorOf returns the operator whose token is tok, comparing every
// token in constant time.
func (h *handler) operatorOf(tok string) (Operator, bool) {
	var found Operator
	ok := false
	for t, o := range *h.ops.Load() {
		if subtle.ConstantTimeCompare([]byte(t), []byte(tok)) == 1 {
			found, ok = o, true
		}
	}
	return found, ok
}

// setCookie sets (maxAge > 0) or expires (maxAge < 0) the session cookie.
func (h *handler) setCookie(w http.ResponseWriter, r *http.Request, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: value, Path: cmpPath(h.cfg.Prefix), MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
}

// cmpPath is the cookie path of prefix: "/" for the root.
func cmpPath(prefix string) string {
	if prefix == "" {
		return "/"
	}
	return prefix
}
