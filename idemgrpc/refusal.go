package idemgrpc

import (
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/operation"
)

// Domain is the ErrorInfo domain of the door's refusals.
const Domain = "idem"

// retryAfter is the RetryInfo delay of a refusal the client should retry.
const retryAfter = time.Second

// grpcCode maps a contract code to the gRPC status code of its refusal.
func grpcCode(c idem.Code) codes.Code {
	switch c {
	case idem.CodeKeyMissing, idem.CodeKeyInvalid, idem.CodeKeyMultiple:
		return codes.InvalidArgument
	case idem.CodePayloadConflict, idem.CodeKeyRetired:
		return codes.FailedPrecondition
	case idem.CodeInProgress, idem.CodeOutcomeUnknown:
		return codes.Aborted
	case idem.CodeStoreUnavailable, idem.CodeWriterFenced, idem.CodeTenantMoved, idem.CodeDraining:
		return codes.Unavailable
	case idem.CodeKeyLimit:
		return codes.ResourceExhausted
	case operation.CodeClientGone:
		return codes.Canceled
	}
	// RESPONSE_TOO_LARGE, HANDLER_ERROR, RESPONSE_UNREADABLE, and anything
	// else: the service's own fault.
	return codes.Internal
}

// refusal is the status of a refusal with code: ErrorInfo{Reason: code},
// and a RetryInfo when a retry with the same key may succeed.
func refusal(code idem.Code, msg string) error {
	c := grpcCode(code)
	st := status.New(c, msg)
	info := &errdetails.ErrorInfo{Reason: string(code), Domain: Domain, Metadata: map[string]string{"contract": idem.ContractVersion}}
	var err error
	if c == codes.Aborted || c == codes.Unavailable {
		st, err = st.WithDetails(info, &errdetails.RetryInfo{RetryDelay: durationpb.New(retryAfter)})
	} else {
		st, err = st.WithDetails(info)
	}
	if err != nil { // the details always marshal; never seen
		return status.Error(c, msg)
	}
	return st.Err()
}

// refusalOf is the status of the core's refusal r. A refusal without a
// detail (storage trouble: the core never says more) gets its code's
// message.
func refusalOf(r operation.Refusal) error {
	msg := r.Detail
	if msg == "" {
		msg = defaultDetail(r.Code)
	}
	return refusal(r.Code, msg)
}

func defaultDetail(c idem.Code) string {
	switch c {
	case idem.CodeStoreUnavailable:
		return "the registry is unavailable; retry with the same key"
	case idem.CodeWriterFenced:
		return "a newer writer epoch is serving; retry with the same key"
	}
	return "refused: " + string(c)
}

// Code returns the contract code of a refusal's ErrorInfo (domain
// "idem"), or "" when err carries none.
func Code(err error) idem.Code {
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == Domain {
			return idem.Code(info.Reason)
		}
	}
	return ""
}
