package idemgrpc

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/canon"
	"github.com/idemkit/idem/internal/failpoint"
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
}

// UnaryServerInterceptor returns the interceptor of cfg.
func UnaryServerInterceptor(cfg Config) (grpc.UnaryServerInterceptor, error) {
	if cfg.Store == nil || cfg.Identity == nil {
		return nil, errors.New("idemgrpc: the interceptor needs a Store and an Identity function")
	}
	for name, m := range cfg.Methods {
		if m.Operation == "" || m.APIRevision == "" {
			return nil, fmt.Errorf("idemgrpc: method %s needs an Operation and an APIRevision", name)
		}
	}
	if cfg.KeyPolicy == (idem.KeyPolicy{}) {
		cfg.KeyPolicy = idem.StrictKeyPolicy
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		m, ok := cfg.Methods[info.FullMethod]
		if !ok {
			return handler(ctx, req)
		}
		return cfg.call(ctx, req, info.FullMethod, m, handler)
	}, nil
}

// call runs one idempotent call.
func (cfg *Config) call(ctx context.Context, req any, method string, m Method, handler grpc.UnaryHandler) (any, error) {
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
	claim := registry.Claim{
		Scope: idem.ScopeOf(id, m.Operation, m.APIRevision, key), Fingerprint: fp, Operation: m.Operation,
		Owner: registry.OwnerOf(id), Tenant: id.Tenant, Retention: m.Retention, WriterEpoch: cfg.WriterEpoch,
	}
	var handlerErr error
	res, err := cfg.Store.ExecuteOnce(ctx, claim, func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
		stream := &recordingStream{ServerTransportStream: grpc.ServerTransportStreamFromContext(ctx)}
		ctx = grpc.NewContextWithServerTransportStream(context.WithValue(ctx, txKey{}, call{tx: tx, operationID: rec.OperationID}), stream)
		resp, err := handler(ctx, req)
		if err != nil {
			handlerErr = err
			return registry.Outcome{}, err
		}
		body, err := stored{Header: stream.header, Trailer: stream.trailer}.marshal(resp)
		if err != nil {
			return registry.Outcome{}, err
		}
		if limit := cmp.Or(max(cfg.MaxResponse, 0), idem.DefaultMaxResponseBody); len(body) > limit {
			handlerErr = refusal(operation.CodeResponseTooLarge, fmt.Sprintf("the response is %d bytes as stored; at most %d can be stored for replay", len(body), limit))
			return registry.Outcome{}, handlerErr
		}
		if err := failpoint.Hit(failpoint.BeforeCommit); err != nil {
			return registry.Outcome{}, err
		}
		return registry.Outcome{State: idem.StateSucceeded, Response: idem.Response{Status: 200, MediaType: storedMediaType, Body: body}}, nil
	})
	switch {
	case err == nil:
		// The verdict decides: a handler whose statement failed because a
		// concurrent call's claim won is answered by that call's record.
	case handlerErr != nil && errors.Is(err, handlerErr):
		return nil, handlerErr // nothing recorded: a retry runs afresh
	default:
		return nil, storageRefusal(err)
	}
	replayed := res.Verdict == registry.Replay
	switch res.Verdict {
	case registry.Execute, registry.Replay:
	case registry.Conflict:
		return nil, refusal(idem.CodePayloadConflict, "the key was used with another request")
	case registry.Retired:
		return nil, refusal(idem.CodeKeyRetired, "the key's operation finished long ago and its response is gone")
	case registry.Unknown:
		return nil, refusal(idem.CodeOutcomeUnknown, "the operation's outcome is not known yet; retry later")
	default:
		return nil, refusal(idem.CodeInProgress, "the operation is in flight; retry later")
	}
	resp, s, err := unmarshalStored(res.Record.Response.Body)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "idemgrpc: the stored response cannot be read: %v", err)
	}
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

// stored is the envelope of a recorded response: the message as an Any,
// its header and trailer metadata.
type stored struct {
	Message []byte      `json:"message"` // a google.protobuf.Any, binary
	Header  metadata.MD `json:"header,omitempty"`
	Trailer metadata.MD `json:"trailer,omitempty"`
}

func (s stored) marshal(resp any) ([]byte, error) {
	msg, ok := resp.(proto.Message)
	if !ok {
		return nil, errors.New("idemgrpc: the response is not a protobuf message")
	}
	a, err := anypb.New(msg)
	if err != nil {
		return nil, err
	}
	if s.Message, err = proto.Marshal(a); err != nil {
		return nil, err
	}
	return json.Marshal(s)
}

func unmarshalStored(body []byte) (proto.Message, stored, error) {
	var s stored
	if err := json.Unmarshal(body, &s); err != nil {
		return nil, s, err
	}
	var a anypb.Any
	if err := proto.Unmarshal(s.Message, &a); err != nil {
		return nil, s, err
	}
	msg, err := a.UnmarshalNew()
	return msg, s, err
}

// recordingStream keeps the metadata a handler sets, to store it with
// the response, and passes it on.
type recordingStream struct {
	grpc.ServerTransportStream
	header, trailer metadata.MD
}

// The metadata is recorded even without a stream to pass it on to (the
// interceptor called in-process, outside a grpc.Server).

func (r *recordingStream) SetHeader(md metadata.MD) error {
	r.header = metadata.Join(r.header, md)
	if r.ServerTransportStream == nil {
		return nil
	}
	return r.ServerTransportStream.SetHeader(md)
}

func (r *recordingStream) SendHeader(md metadata.MD) error {
	r.header = metadata.Join(r.header, md)
	if r.ServerTransportStream == nil {
		return nil
	}
	return r.ServerTransportStream.SendHeader(md)
}

func (r *recordingStream) SetTrailer(md metadata.MD) error {
	r.trailer = metadata.Join(r.trailer, md)
	if r.ServerTransportStream == nil {
		return nil
	}
	return r.ServerTransportStream.SetTrailer(md)
}
