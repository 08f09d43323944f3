package payments

import "github.com/idemkit/idem/canon"

// SchemaRevision is the revision of the payments.v1 request schema; it is
// bound into every fingerprint of POST /v1/payments.
const SchemaRevision = "payments.v1"

// Schema returns the schema of POST /v1/payments bodies, revision
// payments.v1 (the same schema as canon/testdata/payments.v1.json):
//
//   - amount: required decimal string, scale 2, greater than zero
//     ("12.5" and "12.50" are the same amount, written "12.50");
//   - currency: required string of three upper-case letters;
//   - payee: required string of at most 64 characters;
//   - memo: optional string; null means absent.
//
// Any other member is refused. Each call returns a new, validated Schema,
// so callers may not change one another's.
func Schema() *canon.Schema {
	s := &canon.Schema{
		Revision: SchemaRevision,
		Fields: map[string]*canon.Field{
			"amount":   {Type: canon.TypeDecimal, Scale: 2, Required: true, Positive: true},
			"currency": {Type: canon.TypeString, Pattern: "[A-Z]{3}", Required: true},
			"payee":    {Type: canon.TypeString, Required: true, MaxLength: 64},
			"memo":     {Type: canon.TypeString, Null: canon.NullAbsent},
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
//   - amount: required decimal string, scale 2, greater than zero, as in
//     payments.v1;
//   - reason: optional string of at most RefundMaxReason characters; null
//     means absent.
//
// Any other member is refused. Each call returns a new, validated Schema.
func RefundSchema() *canon.Schema {
	s := &canon.Schema{
		Revision: RefundSchemaRevision,
		Fields: map[string]*canon.Field{
			"amount": {Type: canon.TypeDecimal, Scale: 2, Required: true, Positive: true},
			"reason": {Type: canon.TypeString, MaxLength: RefundMaxReason, Null: canon.NullAbsent},
		},
	}
	if err := s.Validate(); err != nil {
		panic(err) // a build defect, caught by every test
	}
	return s
}
