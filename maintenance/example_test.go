package maintenance_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/maintenance"
	"github.com/idemkit/idem/registry"
)

// provider is an in-process downstream that has executed every key it is
// asked about (its answer to the first call was lost).
type provider struct{}

func (provider) Send(_ context.Context, key string, _ []byte) effect.Answer {
	return effect.Answer{Kind: effect.Executed, Handle: "tr_1", Detail: "re-sent " + key}
}

func (provider) Lookup(_ context.Context, key string) effect.Answer {
	return effect.Answer{Kind: effect.Executed, Handle: "tr_1", Body: []byte(`{"id":"tr_1"}`), Detail: "GET /transfers/" + key + " answered 200 executed"}
}

// ExampleRunner: an operation whose downstream answer was lost is UNKNOWN;
// the maintenance runner settles it on evidence — it asks the downstream
// about the operation's own key — and stores the operation's rendering of
// the result, without any client retry.
func ExampleRunner() {
	ctx := context.Background()
	store, err := idemsqlite.OpenMemory(ctx, idemsqlite.Options{})
	if err != nil {
		panic(err)
	}
	defer store.Close()

	// An operation that began its effect, then lost the downstream's answer.
	rec, _, _ := store.Reserve(ctx, registry.Claim{Scope: idem.ScopeHash{7}, Operation: "transfers.create"})
	store.BeginEffect(ctx, rec, "transfer", []byte(`{"amount":"10.00"}`))
	rec, _ = store.GetByID(ctx, rec.OperationID)
	unknown, _ := store.MarkUnknown(ctx, rec)
	fmt.Println(unknown.State)

	effects := effect.Set{"transfers.create": {
		Downstreams: map[string]effect.Downstream{"transfer": provider{}},
		Render: func(rec registry.Record, effs []registry.Effect) (registry.Outcome, error) {
			return registry.Outcome{State: idem.StateSucceeded,
				Response: idem.Response{Status: 201, MediaType: "application/json", Body: []byte(`{"provider_transfer":"` + effs[0].Handle + `"}`)}}, nil
		},
	}}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() {
		done <- (&maintenance.Runner{Store: store, Effects: effects, RecoverEvery: 50 * time.Millisecond,
			Logger: slog.New(slog.DiscardHandler)}).Run(ctx)
	}()
	for deadline := time.Now().Add(10 * time.Second); ; {
		now, err := store.GetByID(ctx, rec.OperationID)
		if err == nil && now.State.Terminal() {
			fmt.Println(now.State, now.Response.Status, string(now.Response.Body))
			break
		}
		if time.Now().After(deadline) {
			fmt.Println("not settled within 10 s:", now.State, err)
			break
		}
		time.Sleep(10 * time.Millisecond) // the runner works in the background
	}
	cancel()
	<-done
	// Output:
	// UNKNOWN
	// SUCCEEDED 201 {"provider_transfer":"tr_1"}
}
