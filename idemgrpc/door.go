package idemgrpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/operation"
	"github.com/idemkit/idem/registry"
)

// door is one call's side of a run (operation.Door): Execute runs the
// handler once in the business transaction and turns its response, with
// the metadata it set, into the answer to store. Not safe for concurrent
// use: one per call.
type door struct {
	req     any
	handler grpc.UnaryHandler
	limit   int // the stored response's cap
	// handlerErr is the handler's error, returned as it is when the run
	// released (nothing recorded).
	handlerErr error
}

// Execute runs the handler with tx and the operation's ID in its
// context. A handler error releases (operation.ErrRelease): nothing is
// recorded and the call gets the error. A response that cannot be stored
// within the cap is operation.ErrTooLarge.
func (d *door) Execute(ctx context.Context, tx registry.Tx, rec registry.Record) (operation.Answer, error) {
	stream := &recordingStream{ServerTransportStream: grpc.ServerTransportStreamFromContext(ctx)}
	ctx = grpc.NewContextWithServerTransportStream(context.WithValue(ctx, txKey{}, call{tx: tx, operationID: rec.OperationID}), stream)
	resp, err := d.handler(ctx, d.req)
	if err != nil {
		d.handlerErr = err
		return operation.Answer{}, fmt.Errorf("%w: %w", operation.ErrRelease, err)
	}
	body, err := stored{Header: stream.header, Trailer: stream.trailer}.marshal(resp)
	if err != nil {
		return operation.Answer{}, err
	}
	if len(body) > d.limit {
		return operation.Answer{}, operation.ErrTooLarge
	}
	return operation.Answer{
		State:    idem.StateSucceeded,
		Response: idem.Response{Status: 200, MediaType: storedMediaType, Body: body},
		Status:   200,
	}, nil
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
