package idemgrpc_test

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/docprogram"
	"github.com/idemkit/idem/internal/failpoint"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/operation"
	"github.com/idemkit/idem/registry"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// createMethod is the test service's one method: orders.v1.Orders/Create,
// request and response google.protobuf.Struct (no generated code needed).
const createMethod = "/orders.v1.Orders/Create"

// serve starts a real gRPC server on 127.0.0.1 whose Create inserts an
// order per execution into the business table orders, through the
// call's transaction, and returns the server's address.
func serve(t *testing.T, st registry.Store) string {
	t.Helper()
	icpt, err := idemgrpc.UnaryServerInterceptor(idemgrpc.Config{
		Store:   st,
		Methods: map[string]idemgrpc.Method{createMethod: {Operation: "orders.create", APIRevision: "v1"}},
		Identity: func(ctx context.Context) (idem.Identity, error) {
			md, _ := metadata.FromIncomingContext(ctx)
			if u := md.Get("x-user"); len(u) == 1 {
				return idem.Identity{Tenant: "acme", Principal: u[0]}, nil
			}
			return idem.Identity{}, errors.New("no user")
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(icpt))
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "orders.v1.Orders",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Create", Handler: func(_ any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			req := new(structpb.Struct)
			if err := dec(req); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				id := idemgrpc.OperationID(ctx)
				sku := req.(*structpb.Struct).Fields["sku"].GetStringValue()
				if sku == "" {
					return nil, status.Error(codes.InvalidArgument, "sku is required")
				}
				if _, err := idemgrpc.Tx(ctx).Exec(ctx, `INSERT INTO orders (id, sku) VALUES ($1, $2)`, id, sku); err != nil {
					return nil, status.Error(codes.Internal, err.Error())
				}
				grpc.SetTrailer(ctx, metadata.Pairs("x-order", id))
				return structpb.NewStruct(map[string]any{"order": id, "sku": sku})
			}
			return icpt(ctx, req, &grpc.UnaryServerInfo{FullMethod: createMethod}, h)
		}}},
	}, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

// openStore opens dsn with the orders table.
func openStore(t *testing.T, dsn string) registry.Store {
	t.Helper()
	st, err := idemstore.Open(context.Background(), dsn, idemstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	if err := st.InTx(context.Background(), func(ctx context.Context, tx registry.Tx) error {
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, sku TEXT NOT NULL)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return st
}

// client is a connection to addr.
func client(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// create calls Create as user with key; it returns the response, its
// header and trailer, and the error.
func create(cc *grpc.ClientConn, user, key, sku string) (*structpb.Struct, metadata.MD, metadata.MD, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	md := metadata.Pairs("x-user", user)
	if key != "" {
		md.Append(idemgrpc.MetadataKey, key)
	}
	ctx = metadata.NewOutgoingContext(ctx, md)
	req, _ := structpb.NewStruct(map[string]any{"sku": sku, "qty": 2})
	resp := new(structpb.Struct)
	var header, trailer metadata.MD
	err := cc.Invoke(ctx, createMethod, req, resp, grpc.Header(&header), grpc.Trailer(&trailer))
	return resp, header, trailer, err
}

// orders counts the business rows.
func orders(t *testing.T, st registry.Store) int {
	t.Helper()
	var n int
	if err := st.InTx(context.Background(), func(ctx context.Context, tx registry.Tx) error {
		return tx.QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&n)
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

const key1 = "7f3c2a1e-5b9d-4c8e-a6f0-1d2b3c4e5f60"

// TestConcurrentCalls: 50 concurrent identical calls over a real socket
// give one execution and 49 replays with the same response bytes and
// trailer, marked idempotent-replayed; a changed request with the same
// key is refused FAILED_PRECONDITION with the contract's PAYLOAD_CONFLICT;
// a call without a key is INVALID_ARGUMENT KEY_MISSING; the handler's own
// refusal is returned unchanged and not recorded. On SQLite and
// PostgreSQL. threat:grpc-duplicate-call
func TestConcurrentCalls(t *testing.T) {
	pgtest.EachDriver(t, "orders.db", func(t *testing.T, driver, dsn string) {
		st := openStore(t, dsn)
		cc := client(t, serve(t, st))
		type answer struct {
			body     []byte
			replayed string
			trailer  string
			err      error
		}
		answers := make([]answer, 50)
		var wg sync.WaitGroup
		for i := range answers {
			wg.Go(func() {
				resp, h, tr, err := create(cc, "ann", key1, "A-1")
				b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(resp)
				answers[i] = answer{b, first(h.Get(idemgrpc.MetadataReplayed)), first(tr.Get("x-order")), err}
			})
		}
		wg.Wait()
		replays := 0
		for i, a := range answers {
			if a.err != nil || string(a.body) != string(answers[0].body) || a.trailer == "" || a.trailer != answers[0].trailer {
				t.Fatalf("call %d: %+v (%v), want the answer of call 0 %+v", i, a, a.err, answers[0])
			}
			if a.replayed == "true" {
				replays++
			}
		}
		if n := orders(t, st); n != 1 || replays != 49 {
			t.Errorf("%d orders and %d replays from 50 identical calls, want 1 and 49", n, replays)
		}
		_, _, _, err := create(cc, "ann", key1, "B-2")
		if status.Code(err) != codes.FailedPrecondition || idemgrpc.Code(err) != idem.CodePayloadConflict {
			t.Errorf("the key with another request: %v (%s), want FAILED_PRECONDITION PAYLOAD_CONFLICT", err, idemgrpc.Code(err))
		}
		_, _, _, err = create(cc, "ann", "", "A-1")
		if status.Code(err) != codes.InvalidArgument || idemgrpc.Code(err) != idem.CodeKeyMissing {
			t.Errorf("no key: %v, want INVALID_ARGUMENT KEY_MISSING", err)
		}
		if _, _, _, err := create(cc, "bob", key1, "A-1"); err != nil {
			t.Errorf("another caller's same key: %v, want its own execution", err)
		}
		key2 := "0d9e8f7a-6b5c-4d3e-8f2a-1b0c9d8e7f6a"
		for range 2 { // a handler's refusal is returned as it is, and not recorded
			if _, _, _, err := create(cc, "ann", key2, ""); status.Code(err) != codes.InvalidArgument || idemgrpc.Code(err) != "" {
				t.Errorf("the handler's refusal: %v, want its INVALID_ARGUMENT", err)
			}
		}
		if _, _, _, err := create(cc, "ann", key2, "C-3"); err != nil {
			t.Errorf("the key after a refusal, with a valid request: %v, want an execution", err)
		}
		if n := orders(t, st); n != 3 {
			t.Errorf("%d orders, want 3", n)
		}
	})
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// Environment of the child server process (TestChildServer).
const (
	childDSNEnv  = "IDEM_TEST_GRPC_DSN"
	childAddrEnv = "IDEM_TEST_GRPC_ADDR_FILE"
)

// TestCrashBeforeCommit: a server process SIGKILLed while a call's
// transaction is open (the before-commit failpoint) leaves neither the
// order nor the record; the client's retry, to another server on the same
// database, executes once, and the next retry replays.
// threat:grpc-duplicate-call
func TestCrashBeforeCommit(t *testing.T) {
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "orders.db")
	st := openStore(t, dsn)
	addrFile := filepath.Join(t.TempDir(), "addr")
	child := exec.Command(os.Args[0], "-test.run=^TestChildServer$", "-test.count=1")
	child.Env = append(os.Environ(), childDSNEnv+"="+dsn, childAddrEnv+"="+addrFile, failpoint.Env+"="+failpoint.BeforeCommit+"=kill")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()
	deadline := time.Now().Add(time.Minute)
	var addr []byte
	for len(addr) == 0 {
		addr, _ = os.ReadFile(addrFile)
		if time.Now().After(deadline) {
			t.Fatal("the child server did not start")
		}
		time.Sleep(20 * time.Millisecond) // polling for the child's address file
	}
	if _, _, _, err := create(client(t, string(addr)), "ann", key1, "A-1"); status.Code(err) != codes.Unavailable {
		t.Errorf("the call whose server died: %v, want UNAVAILABLE", err)
	}
	var exit *exec.ExitError
	if err := <-exited; !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the child was not killed at the failpoint: %v", err)
	}
	if n := orders(t, st); n != 0 {
		t.Fatalf("%d orders after the crash before commit, want 0", n)
	}
	cc := client(t, serve(t, st))
	_, h, _, err := create(cc, "ann", key1, "A-1")
	if err != nil || first(h.Get(idemgrpc.MetadataReplayed)) != "false" {
		t.Fatalf("the retry: %v %v, want an execution", err, h)
	}
	if _, h, _, err := create(cc, "ann", key1, "A-1"); err != nil || first(h.Get(idemgrpc.MetadataReplayed)) != "true" {
		t.Errorf("the next retry: %v %v, want a replay", err, h)
	}
	if n := orders(t, st); n != 1 {
		t.Errorf("%d orders, want 1", n)
	}
}

// TestChildServer is the server process TestCrashBeforeCommit starts; it
// does nothing in a normal run.
func TestChildServer(t *testing.T) {
	dsn := os.Getenv(childDSNEnv)
	if dsn == "" {
		t.Skip("the child server of TestCrashBeforeCommit")
	}
	addr := serve(t, openStore(t, dsn))
	if err := os.WriteFile(os.Getenv(childAddrEnv), []byte(addr), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Minute) // the failpoint kills this process first
	t.Fatal("the failpoint did not kill the child")
}

// TestGRPCDocProgram: the server program of docs/grpc.md, built in a
// fresh module and run (only its listen address is changed), executes a
// call once, replays its retry, and refuses another request under the
// key with PAYLOAD_CONFLICT.
func TestGRPCDocProgram(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program in a fresh module")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir, bin := docprogram.Build(t, docprogram.Source(t, "docs/grpc.md", "<!-- grpc-program", `"127.0.0.1:9090"`, `"`+addr+`"`))
	cmd := exec.Command(bin)
	cmd.Dir = dir
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	cc := client(t, addr)
	var h metadata.MD
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, h, _, err = create(cc, "ann", key1, "A-1")
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // polling for the program to listen
	}
	if err != nil || first(h.Get(idemgrpc.MetadataReplayed)) != "false" {
		t.Fatalf("first call: %v %v", err, h)
	}
	if _, h, _, err := create(cc, "ann", key1, "A-1"); err != nil || first(h.Get(idemgrpc.MetadataReplayed)) != "true" {
		t.Errorf("retry: %v %v, want a replay", err, h)
	}
	if _, _, _, err := create(cc, "ann", key1, "B-2"); idemgrpc.Code(err) != idem.CodePayloadConflict {
		t.Errorf("another request under the key: %v, want PAYLOAD_CONFLICT", err)
	}
}

// TestResponseTooLarge: a caller whose request makes the handler answer
// more than can be stored (here an echoed 70 KB field, above the 64 KiB
// default) gets INTERNAL with RESPONSE_TOO_LARGE, and nothing is recorded
// — neither the order nor a record — so the registry does not grow by
// what a caller sends, and a retry with a storable answer executes.
// threat:grpc-unbounded-response
func TestResponseTooLarge(t *testing.T) {
	st := openStore(t, "sqlite:"+filepath.Join(t.TempDir(), "orders.db"))
	cc := client(t, serve(t, st))
	huge := strings.Repeat("x", 70_000)
	for range 2 {
		_, _, _, err := create(cc, "ann", key1, huge)
		if status.Code(err) != codes.Internal || idemgrpc.Code(err) != operation.CodeResponseTooLarge {
			t.Fatalf("a response too large to store: %v (%s), want INTERNAL RESPONSE_TOO_LARGE", err, idemgrpc.Code(err))
		}
	}
	if n := orders(t, st); n != 0 {
		t.Errorf("%d orders after refused answers, want 0", n)
	}
	if _, h, _, err := create(cc, "ann", "5a4b3c2d-1e0f-4a9b-8c7d-6e5f4a3b2c1d", "A-1"); err != nil || first(h.Get(idemgrpc.MetadataReplayed)) != "false" {
		t.Errorf("another call: %v, want an execution", err)
	}
}

// TestStoreUnavailable: a call whose registry cannot be reached is
// refused UNAVAILABLE with STORE_UNAVAILABLE and a RetryInfo — it fails
// closed — and its handler never runs.
func TestStoreUnavailable(t *testing.T) {
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "orders.db")
	st := openStore(t, dsn)
	cc := client(t, serve(t, st))
	st.Close()
	_, _, _, err := create(cc, "ann", key1, "A-1")
	if status.Code(err) != codes.Unavailable || idemgrpc.Code(err) != idem.CodeStoreUnavailable {
		t.Fatalf("a call with the registry closed: %v (%s), want UNAVAILABLE STORE_UNAVAILABLE", err, idemgrpc.Code(err))
	}
	var retry bool
	for _, d := range status.Convert(err).Details() {
		_, retry = d.(*errdetails.RetryInfo)
		if retry {
			break
		}
	}
	if !retry {
		t.Errorf("the refusal carries no RetryInfo: %v", status.Convert(err).Details())
	}
	if n := orders(t, openStore(t, dsn)); n != 0 {
		t.Errorf("%d orders written with the registry closed, want 0", n)
	}
}
