package payments

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/secretfile"
	"github.com/idemkit/idem/internal/strictjson"
)

// Tokens maps bearer tokens to the identity they authenticate.
type Tokens map[string]idem.Identity

// DemoToken is the token DemoTokens accepts.
const DemoToken = "demo"

// DemoTokens returns the tokens "idem serve" accepts without --auth: the
// token "demo" for tenant "demo", principal "demo".
func DemoTokens() Tokens {
	return Tokens{DemoToken: {Tenant: "demo", Principal: "demo"}}
}

// maxTokenFile bounds the size of a tokens file.
const maxTokenFile = 1 << 20

// LoadTokens reads a tokens file: one JSON object
//
//	{"<bearer token>": {"tenant": "…", "principal": "…"}, …}
//
// It refuses malformed JSON (duplicate tokens included), unknown members,
// an empty token, tenant or principal, a token that cannot hold 128
// random bits (secretfile.CheckToken: at least 22 characters, 32 if all
// hex digits, not of low variety), a file without tokens, and a file its
// group or others may read or change.
func LoadTokens(path string) (Tokens, error) {
	b, err := secretfile.Read(path, "tokens file", maxTokenFile)
	if err != nil {
		return nil, fmt.Errorf("payments: tokens: %w", err)
	}
	t, err := parseTokens(b)
	if err != nil {
		return nil, fmt.Errorf("payments: tokens %s: %w", path, err)
	}
	return t, nil
}

func parseTokens(b []byte) (Tokens, error) {
	var raw map[string]*struct {
		Tenant    string `json:"tenant"`
		Principal string `json:"principal"`
	}
	if err := strictjson.Decode(b, maxTokenFile, &raw); err != nil {
		return nil, err
	}
	if len(raw) == 0 {
		return nil, errors.New("no tokens")
	}
	t := make(Tokens, len(raw))
	for tok, id := range raw {
		switch {
		case tok == "" || strings.ContainsAny(tok, " \t\r\n"):
			return nil, errors.New("a token is empty or contains white space")
		case id == nil || id.Tenant == "" || id.Principal == "":
			return nil, errors.New("every token needs a non-empty tenant and principal")
		case secretfile.CheckToken(tok) != nil:
			return nil, fmt.Errorf("the token of %s/%s: %w", id.Tenant, id.Principal, secretfile.CheckToken(tok))
		}
		t[tok] = idem.Identity{Tenant: id.Tenant, Principal: id.Principal}
	}
	return t, nil
}

// errUnauthenticated is what Identity returns for a request without a
// known bearer token; its text is never shown to clients.
var errUnauthenticated = errors.New("payments: missing or unknown bearer token")

// Identity returns the identity of the request's "Authorization: Bearer
// TOKEN" header (the scheme is case-insensitive), or an error when the
// header is missing, malformed, repeated or names an unknown token.
func (t Tokens) Identity(r *http.Request) (idem.Identity, error) {
	h := r.Header.Values("Authorization")
	if len(h) != 1 {
		return idem.Identity{}, errUnauthenticated
	}
	scheme, tok, ok := strings.Cut(strings.TrimSpace(h[0]), " ")
	tok = strings.TrimSpace(tok)
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return idem.Identity{}, errUnauthenticated
	}
	id, ok := t[tok]
	if !ok {
		return idem.Identity{}, errUnauthenticated
	}
	return id, nil
}
