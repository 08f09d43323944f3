package effect

import (
	"context"
	"testing"

	"github.com/idemkit/idem/registry"
)

// TestEvidence pins the one evidence rule: only an execution, a final
// refusal, or a "not found" that voids the key settle an effect; every
// other answer proves nothing.
// Proves threat:lost-downstream-answer (docs/threat-model.md).
func TestEvidence(t *testing.T) {
	for _, c := range []struct {
		a      Answer
		result string
		ok     bool
	}{
		{Answer{Kind: Executed, Handle: "tr_1"}, registry.EffectSucceeded, true},
		{Answer{Kind: Declined}, registry.EffectFailed, true},
		{Answer{Kind: NotFound, Void: true}, registry.EffectFailed, true},
		{Answer{Kind: NotFound}, "", false},
		{Answer{Kind: Indefinite, Detail: "POST /transfers answered 503 PROVIDER_FAILURE"}, "", false},
		{Answer{Kind: Indefinite, Void: true}, "", false},
		{Answer{}, "", false},
	} {
		result, ok := c.a.Evidence()
		if result != c.result || ok != c.ok {
			t.Errorf("%s (void %v): Evidence() = %q, %v; want %q, %v", c.a.Kind, c.a.Void, result, ok, c.result, c.ok)
		}
	}
}

// TestValidate: an Operation needs a downstream per named effect and a
// renderer.
func TestValidate(t *testing.T) {
	render := func(registry.Record, []registry.Effect) (registry.Outcome, error) { return registry.Outcome{}, nil }
	for name, c := range map[string]struct {
		op *Operation
		ok bool
	}{
		"nil":           {nil, false},
		"no downstream": {&Operation{Render: render}, false},
		"no render":     {&Operation{Downstreams: map[string]Downstream{"x": nil}}, false},
		"nil system":    {&Operation{Downstreams: map[string]Downstream{"x": nil}, Render: render}, false},
		"empty name":    {&Operation{Downstreams: map[string]Downstream{"": stub{}}, Render: render}, false},
		"ok":            {&Operation{Downstreams: map[string]Downstream{"x": stub{}}, Render: render}, true},
	} {
		if err := c.op.Validate(); (err == nil) != c.ok {
			t.Errorf("%s: Validate() = %v, want ok %v", name, err, c.ok)
		}
	}
}

type stub struct{}

func (stub) Send(ctx context.Context, key string, request []byte) Answer { return Answer{} }
func (stub) Lookup(ctx context.Context, key string) Answer               { return Answer{} }
