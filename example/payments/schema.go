package payments

import "github.com/idemkit/idem/canon"

// SchemaRevision is the revision of the payments.v1 request schema; it is
// bound into every fingerprint of POST /v1/payments.
const SchemaRevision = "payments.v1"

// MaxPayee is the longest payee a payment or transfer may name, in
// characters.
const MaxPayee = 64

// Text is the pattern of every free-text field of the service's request
// schemas (payee, memo, reason): any character but NUL (U+0000). The
// columns that hold them are TEXT, which PostgreSQL cannot store NUL in
// (SQLite can), so a NUL is refused with 400 SCHEMA_VIOLATION before
// anything is recorded, on both engines alike, instead of failing the
// handler's insert on one of them. (Every other character a valid
// request can carry fits: canon refuses invalid UTF-8 and lone
// surrogates before the schema is read.)
const Text = `[^\x00]*`

// MaxMemo is the longest memo a payment or transfer may carry, in
// characters. Every field of every request schema of the service is
// bounded, so that the largest valid request renders a response far below
// the snapshot cap (idem.DefaultMaxResponseBody, 64 KiB) even when every
// character is written as a six-byte JSON escape: a valid request always
// gets an answer that can be stored and replayed, and 500
// RESPONSE_TOO_LARGE means a defect of the service.
const MaxMemo = 4096

// Schema returns the schema of POST /v1/payments and POST /v1/transfers
// bodies, revision payments.v1 (the same schema as
// canon/testdata/payments.v1.json):
//
//   - amount: required decimal string, scale 2, greater than zero
//     ("12.5" and "12.50" are the same amount, written "12.50"), at most
//     canon.MaxDecimalDigits digits before the point;
//   - currency: required string of three upper-case letters;
//   - payee: required string of at most MaxPayee characters, matching
//     Text (no NUL);
//   - memo: optional string of at most MaxMemo characters, matching Text;
//     null means absent.
//
// A longer value is refused with 400 SCHEMA_VIOLATION before anything is
// recorded. The bounds only refuse: no payload they accept is written
// differently, so the revision (and with it every fingerprint) stays.
// Any other member is refused. Each call returns a new, validated Schema,
// so callers may not change one another's.
func Schema() *canon.Schema {
	s := &canon.Schema{
		Revision: SchemaRevision,
		Fields: map[string]*canon.Field{
			"amount":   {Type: canon.TypeDecimal, Scale: 2, Required: true, Positive: true},
			"currency": {Type: canon.TypeString, Pattern: "[A-Z]{3}", MaxLength: 3, Required: true},
			"payee":    {Type: canon.TypeString, Required: true, MaxLength: MaxPayee, Pattern: Text},
			"memo":     {Type: canon.TypeString, MaxLength: MaxMemo, Pattern: Text, Null: canon.NullAbsent},
		},
	}
	if err := s.Validate(); err != nil {
		panic(err) // a build defect, caught by every test
	}
	return s
}

// RefundSchemaRevision is the revision of the refunds.v1 request schema;
// it is bound into every fingerprint of POST /v1/payments/{id}/refunds.
const RefundSchemaRevision = "refunds.v1"

// RefundMaxReason is the longest reason a refund may give, in characters.
const RefundMaxReason = 200

// RefundSchema returns the schema of POST /v1/payments/{id}/refunds
// bodies, revision refunds.v1 (the same schema as
// canon/testdata/refunds.v1.json):
//
//   - amount: required decimal string, scale 2, greater than zero, at most
//     canon.MaxDecimalDigits digits before the point, as in payments.v1;
//   - reason: optional string of at most RefundMaxReason characters,
//     matching Text (no NUL); null means absent.
//
// Any other member is refused. Each call returns a new, validated Schema.
func RefundSchema() *canon.Schema {
	s := &canon.Schema{
		Revision: RefundSchemaRevision,
		Fields: map[string]*canon.Field{
			"amount": {Type: canon.TypeDecimal, Scale: 2, Required: true, Positive: true},
			"reason": {Type: canon.TypeString, MaxLength: RefundMaxReason, Pattern: Text, Null: canon.NullAbsent},
		},
	}
	if err := s.Validate(); err != nil {
		panic(err) // a build defect, caught by every test
	}
	return s
}
