package idemgrpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/canon"
	"github.com/idemkit/idem/operation"
	"github.com/idemkit/idem/registry"
)

// Metadata keys of the door.
const (
	// MetadataKey carries the call's idempotency key.
	MetadataKey = "idempotency-key"
	// MetadataOperation is the response header naming the operation.
	MetadataOperation = "idempotency-operation"
	// MetadataReplayed is the response header "true" on a replay.
	MetadataReplayed = "idempotent-replayed"
)

// fingerprintDomain separates a call's fingerprint from every other hash.
const fingerprintDomain = "idem.grpc.v1/fingerprint"

// storedMediaType marks a stored gRPC response (an envelope, see stored).
const storedMediaType = "application/vnd.idem.grpc+json"

// Method is one idempotent method.
type Method struct {
	// Operation and APIRevision name what the method does; both are part
	// of every call's scope. Required.
	Operation, APIRevision string
	// Retention is how long a call's record is kept with its response;
	// 0 means registry.DefaultRetention.
	Retention time.Duration
}

// Config is the interceptor's.
type Config struct {
	// Store is the registry beside the service's business tables. Required.
	Store registry.Store
	// Methods are the idempotent methods by full name
	// ("/orders.v1.Orders/Create"); others pass through untouched.
	Methods map[string]Method
	// Identity returns the authenticated caller of a call (from its
	// credentials or metadata). Required.
	Identity func(ctx context.Context) (idem.Identity, error)
	// KeyPolicy is the keys accepted; zero means idem.StrictKeyPolicy.
	KeyPolicy idem.KeyPolicy
	// WriterEpoch is the epoch the service writes at.
	WriterEpoch int64
	// MaxResponse bounds a stored response (the message, its header and
	// trailer, as stored); 0 means idem.DefaultMaxResponseBody, as the
	// HTTP door's. A larger one is refused INTERNAL with
	// RESPONSE_TOO_LARGE and nothing is recorded: a response that cannot
	// be replayed must not be acknowledged as done.
	MaxResponse int
	// Observer receives the core's counts and latencies per method
	// (operation.Observer; idemhttp's metrics implement it); nil: none.
	Observer operation.Observer
	// Logger receives the core's logs; nil means slog.Default().
	Logger *slog.Logger
}

// UnaryServerInterceptor returns the interceptor of cfg. Each method
// gets its own operation.Core in the one-transaction style: the core
// that serves the HTTP door's operations, so a gRPC call is claimed,
// executed, recorded, replayed and refused by the same code.
func UnaryServerInterceptor(cfg Config) (grpc.UnaryServerInterceptor, error) {
	if cfg.Store == nil || cfg.Identity == nil {
		return nil, errors.New("idemgrpc: the interceptor needs a Store and an Identity function")
	}
	if cfg.KeyPolicy == (idem.KeyPolicy{}) {
		cfg.KeyPolicy = idem.StrictKeyPolicy
	}
	cores := make(map[string]*operation.Core, len(cfg.Methods))
	for name, m := range cfg.Methods {
		if m.Operation == "" || m.APIRevision == "" {
			return nil, fmt.Errorf("idemgrpc: method %s needs an Operation and an APIRevision", name)
		}
		op := &operation.Config{
			Name: m.Operation, APIRevision: m.APIRevision, Retention: m.Retention,
			MaxResponseBody: max(cfg.MaxResponse, 0), OneTransaction: true,
		}
		if err := op.Validate(); err != nil {
			return nil, fmt.Errorf("idemgrpc: method %s: %w", name, err)
		}
		cores[name] = operation.NewCore(operation.Core{
			Store: cfg.Store, Config: op, WriterEpoch: cfg.WriterEpoch,
			Observer: cfg.Observer, Logger: cfg.Logger,
		})
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		core, ok := cores[info.FullMethod]
		if !ok {
			return handler(ctx, req)
		}
		return cfg.call(ctx, core, req, info.FullMethod, handler)
	}, nil
}

// call runs one idempotent call: the door's own mapping (key from
// metadata, caller, canonical request) into an operation.Request, the
// core's run, and the Result written back as gRPC (answer).
func (cfg *Config) call(ctx context.Context, core *operation.Core, req any, method string, handler grpc.UnaryHandler) (any, error) {
	id, err := cfg.Identity(ctx)
	if err != nil {
		return nil, status.Error(codes.Unauthenticated, "authentication required")
	}
	md, _ := metadata.FromIncomingContext(ctx)
	key, err := idem.ParseKey(md.Get(MetadataKey), cfg.KeyPolicy)
	if err != nil {
		return nil, refusal(idem.CodeOf(err), err.Error())
	}
	msg, ok := req.(proto.Message)
	if !ok {
		return nil, status.Error(codes.Internal, "idemgrpc: the request is not a protobuf message")
	}
	fp, err := fingerprint(method, msg)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "idemgrpc: the request has no canonical form: %v", err)
	}
	op := core.Config
	d := &door{req: req, handler: handler, limit: op.MaxResponseBodyOrDefault()}
	res := core.Run(ctx, operation.Request{
		Identity: id, Scope: idem.ScopeOf(id, op.Name, op.ScopeRevision(), key), Fingerprint: fp,
	}, d)
	return answer(ctx, res, d)
}

// answer writes a run's Result back as gRPC: the stored response (its
// message, header and trailer) for an execution or a replay, the
// handler's own error when nothing was recorded, or the refusal.
func answer(ctx context.Context, res operation.Result, d *door) (any, error) {
	switch res.Kind {
	case operation.Executed, operation.Replayed:
	case operation.Released:
		return nil, d.handlerErr // nothing recorded: a retry runs afresh
	default: // Refused; Plain is never answered (no shadow on this door)
		return nil, refusalOf(res.Refusal)
	}
	resp, s, err := unmarshalStored(res.Record.Response.Body)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "idemgrpc: the stored response cannot be read: %v", err)
	}
	replayed := res.Kind == operation.Replayed
	header := metadata.Join(s.Header, metadata.Pairs(MetadataOperation, res.Record.OperationID, MetadataReplayed, fmt.Sprint(replayed)))
	if err := grpc.SetHeader(ctx, header); err != nil {
		return nil, status.Errorf(codes.Internal, "idemgrpc: %v", err)
	}
	if len(s.Trailer) > 0 {
		grpc.SetTrailer(ctx, s.Trailer)
	}
	return resp, nil
}

// fingerprint hashes the method and the request's canonical form.
func fingerprint(method string, msg proto.Message) (idem.Fingerprint, error) {
	js, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(msg)
	if err != nil {
		return idem.Fingerprint{}, err
	}
	c, err := canon.Options{Mode: canon.ModeJSON}.Append(nil, js)
	if err != nil {
		return idem.Fingerprint{}, err
	}
	return idem.Fingerprint(idem.HashStrings(fingerprintDomain, method, string(c))), nil
}
