package idempg_test

import (
	"context"
	"fmt"
	"net/http"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/registry"
)

// ExampleOpen opens the shared store on PostgreSQL (migrations applied;
// any number of processes may share the database) and bounds every call
// of the request path, so that storage trouble fails requests closed.
// It needs a server, so it is compiled but not run here; the conformance
// suite runs the same calls against a throwaway cluster.
func ExampleOpen() {
	ctx := context.Background()
	store, err := idempg.Open(ctx, "postgres://idem@127.0.0.1:5432/idem?sslmode=disable", idempg.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	who := func(r *http.Request) (idem.Identity, error) { // your authentication
		return idem.Identity{Tenant: "acme", Principal: r.Header.Get("X-User")}, nil
	}
	mw, err := idemhttp.New(ctx, registry.WithTimeout(store, registry.DefaultCallTimeout),
		idemhttp.Operation{Name: "orders.create", APIRevision: "v1"}, who, idemhttp.Options{})
	fmt.Println(mw != nil, err)
}
