package console

import (
	"errors"
	"fmt"
	"strings"

	"github.com/idemkit/idem/internal/secretfile"
	"github.com/idemkit/idem/internal/strictjson"
)

// Operator is a person who may use the console.
type Operator struct {
	// Name names the operator in the page header, the logs and, as the
	// actor, the reconciliation log. Required, unique among Operators.
	Name string
	// ShowResponses lets the operator read stored response bodies; without
	// it (the zero value) the console shows their metadata only.
	ShowResponses bool
	// ShowTenants lets the operator see an operation's tenant by name
	// (when Config.Tenants names one whose hash the record holds); without
	// it (the zero value) the console shows the tenant's hash only.
	ShowTenants bool
}

// Operators maps console tokens to operators. They are not API tokens: a
// bearer token of the service cannot log in, and an operator token is
// no bearer token of the service.
type Operators map[string]Operator

// maxOperatorsFile bounds the size of an operators file.
const maxOperatorsFile = 1 << 20

// LoadOperators reads an operators file: one JSON object
//
//	{"<token>": {"name": "alice", "show_responses": true}, …}
//
// show_responses is optional (default false). It refuses malformed JSON,
// duplicate tokens, unknown members, an empty token or one with white
// space, a token that cannot hold 128 random bits (fewer than 22
// characters, 32 if all hex digits, or of low variety:
// secretfile.CheckToken), an empty or duplicate name, and a file without
// operators; and a file its group or others may read or change.
func LoadOperators(path string) (Operators, error) {
	b, err := secretfile.Read(path, "operators file", maxOperatorsFile)
	if err != nil {
		return nil, fmt.Errorf("console: operators: %w", err)
	}
	ops, err := ParseOperators(b)
	if err != nil {
		return nil, fmt.Errorf("console: operators %s: %w", path, err)
	}
	return ops, nil
}

// ParseOperators parses the contents of an operators file (see
// LoadOperators).
func ParseOperators(b []byte) (Operators, error) {
	var raw map[string]*struct {
		Name          string `json:"name"`
		ShowResponses bool   `json:"show_responses"`
		ShowTenants   bool   `json:"show_tenants"`
	}
	if err := strictjson.Decode(b, maxOperatorsFile, &raw); err != nil {
		return nil, err
	}
	ops := make(Operators, len(raw))
	for tok, o := range raw {
		if o == nil {
			return nil, errors.New("every token needs an object with a name")
		}
		ops[tok] = Operator{Name: o.Name, ShowResponses: o.ShowResponses, ShowTenants: o.ShowTenants}
	}
	if err := ops.validate(); err != nil {
		return nil, err
	}
	return ops, nil
}

// validate checks the rules LoadOperators states.
func (ops Operators) validate() error {
	if len(ops) == 0 {
		return errors.New("no operators")
	}
	names := make(map[string]bool, len(ops))
	for tok, o := range ops {
		switch {
		case tok == "" || strings.ContainsAny(tok, " \t\r\n"):
			return errors.New("a token is empty or contains white space")
		case strings.TrimSpace(o.Name) == "":
			return errors.New("every operator needs a non-empty name")
		case secretfile.CheckToken(tok) != nil:
			return fmt.Errorf("operator %q: %w", o.Name, secretfile.CheckToken(tok))
		case names[o.Name]:
			return fmt.Errorf("the name %q is given to two tokens", o.Name)
		}
		names[o.Name] = true
	}
	return nil
}

// byName returns the operator called name.
func (ops Operators) byName(name string) (Operator, bool) {
	for _, o := range ops {
		if o.Name == name {
			return o, true
		}
	}
	return Operator{}, false
}
