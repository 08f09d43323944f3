package canon

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

// paymentsSchema is payments.v1 of the reference service (SPEC R), the
// same schema as testdata/payments.v1.json.
func paymentsSchema() *Schema {
	return &Schema{
		Revision: "payments.v1",
		Fields: map[string]*Field{
			"amount":   {Type: TypeDecimal, Scale: 2, Required: true, Positive: true},
			"currency": {Type: TypeString, Pattern: "[A-Z]{3}", MaxLength: 3, Required: true},
			"payee":    {Type: TypeString, Required: true, MaxLength: 64, Pattern: `[^\x00]*`},
			"memo":     {Type: TypeString, MaxLength: 4096, Pattern: `[^\x00]*`, Null: NullAbsent},
		},
	}
}

func schemaOpts(s *Schema) Options { return Options{Mode: ModeSchema, Schema: s} }

// schemaCase is one input and either its canonical output or a refusal code.
type schemaCase struct {
	in, want, code string
}

func runSchemaCases(t *testing.T, s *Schema, tests []schemaCase) {
	t.Helper()
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		got, err := schemaOpts(s).Append(nil, []byte(tt.in))
		if tt.code != "" {
			if err == nil {
				t.Errorf("%s: accepted as %s, want %s", tt.in, got, tt.code)
				continue
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.Code != tt.code {
				t.Errorf("%s: %v, want %s", tt.in, err, tt.code)
			}
			continue
		}
		if err != nil || string(got) != tt.want {
			t.Errorf("%s:\n got %s, %v\nwant %s", tt.in, got, err, tt.want)
		}
	}
}

func payment(amount string, extra ...string) string {
	return `{"amount":` + amount + `,"currency":"EUR","payee":"acct_1"` + strings.Join(extra, "") + `}`
}

func TestSchemaPayments(t *testing.T) {
	t.Parallel()
	const (
		sv   = CodeSchemaViolation
		bad  = CodeInvalidJSON
		base = `{"amount":"12.50","currency":"EUR","payee":"acct_1"}`
	)
	runSchemaCases(t, paymentsSchema(), []schemaCase{
		{payment(`"12.5"`), base, ""},
		{payment(`"12.50"`), base, ""},
		{` { "payee" : "acct_1", "currency":"EUR" , "amount" : "12.5" } `, base, ""},
		{payment(`"12.5"`, `,"memo":null`), base, ""}, // null means absent
		{payment(`"12"`), `{"amount":"12.00","currency":"EUR","payee":"acct_1"}`, ""},
		{payment(`"0.01"`), `{"amount":"0.01","currency":"EUR","payee":"acct_1"}`, ""},
		{payment(`"9` + strings.Repeat("0", 29) + `"`), `{"amount":"9` + strings.Repeat("0", 29) + `.00","currency":"EUR","payee":"acct_1"}`, ""}, // 30 digits
		{payment(`"\u0031\u0032.5"`), base, ""},                                                                                                   // escapes are decoded before the decimal is read
		{payment(`"12.5"`, `,"memo":"r\u00e9f \/ 1"`), `{"amount":"12.50","currency":"EUR","memo":"réf / 1","payee":"acct_1"}`, ""},
		{`{"amount":"1","currency":"EUR","payee":"` + strings.Repeat("é", 64) + `"}`, `{"amount":"1.00","currency":"EUR","payee":"` + strings.Repeat("é", 64) + `"}`, ""},
		{`{"amount":"1","currency":"EUR","payee":"` + strings.Repeat("€", 64) + `"}`, `{"amount":"1.00","currency":"EUR","payee":"` + strings.Repeat("€", 64) + `"}`, ""},
		// Decimals.
		{payment(`"12.505"`), "", sv},
		{payment(`"012.50"`), "", sv},
		{payment(`"00.50"`), "", sv},
		{payment(`"1e3"`), "", sv},
		{payment(`"12."`), "", sv},
		{payment(`".5"`), "", sv},
		{payment(`"-1.00"`), "", sv},
		{payment(`"0.00"`), "", sv},
		{payment(`"-0.00"`), "", sv},
		{payment(`"0"`), "", sv},
		{payment(`""`), "", sv},
		{payment(`"-"`), "", sv},
		{payment(`"+1.00"`), "", sv},
		{payment(`" 12.50"`), "", sv},
		{payment(`"12.50 "`), "", sv},
		{payment(`"12,50"`), "", sv},
		{payment(`"1.2.3"`), "", sv},
		{payment(`"١٢"`), "", sv},                               // Arabic-Indic digits
		{payment(`"1` + strings.Repeat("0", 30) + `"`), "", sv}, // 31 integer digits
		{payment(`12.5`), "", sv},                               // a number, not a string
		{payment(`12`), "", sv},
		{payment(`null`), "", sv},
		{payment(`["12.50"]`), "", sv},
		// Other fields.
		{`{"amount":"1","currency":"eur","payee":"p"}`, "", sv},
		{`{"amount":"1","currency":"EURO","payee":"p"}`, "", sv},
		{`{"amount":"1","currency":"EUR\n","payee":"p"}`, "", sv},
		{`{"amount":"1","currency":978,"payee":"p"}`, "", sv},
		{`{"amount":"1","currency":"EUR"}`, "", sv},
		{`{"amount":"1","currency":"EUR","payee":null}`, "", sv},
		{`{"currency":"EUR","payee":"p"}`, "", sv},
		{`{"amount":"1","currency":"EUR","payee":"` + strings.Repeat("é", 65) + `"}`, "", sv},
		{`{"amount":"1","currency":"EUR","payee":"` + strings.Repeat("a", 65) + `"}`, "", sv},
		{payment(`"1"`, `,"memo":7`), "", sv},
		{payment(`"1"`, `,"extra":1`), "", sv},
		{payment(`"1"`, `,"Memo":"x"`), "", sv},
		{`[]`, "", sv},
		{`"12.50"`, "", sv},
		{`{}`, "", sv},
		// Strict parsing comes first: INVALID_JSON, never SCHEMA_VIOLATION.
		{`{"amount":"1","amount":"2","currency":"EUR","payee":"p"}`, "", bad},
		{`{"amount":"1","currency":"EUR","payee":"p","Payee":"q"}`, "", bad},
		{payment(`"1"`, `,"memo":"a","memo":null`), "", bad},
		{payment(`"12.505"`, `,"extra":{"a":1,"a":2}`), "", bad},
		{payment(`"1"`, `,"zzz":{"k":1,"K":2}`), "", bad},
		{`[{"a":1,"a":2}]`, "", bad},
		{payment(`"1"`, `,`), "", bad},
		{payment(`"1"`) + `x`, "", bad},
	})
}

// TestSchemaPaymentsSameAmount: amounts equal at scale 2 canonicalise to
// identical bytes, different amounts to different bytes.
func TestSchemaPaymentsSameAmount(t *testing.T) {
	t.Parallel()
	o := schemaOpts(paymentsSchema())
	a, errA := o.Append(nil, []byte(payment(`"12.5"`)))
	b, errB := o.Append(nil, []byte(payment(`"12.50"`, `,"memo":null`)))
	c, errC := o.Append(nil, []byte(payment(`"12.51"`)))
	if errA != nil || errB != nil || errC != nil {
		t.Fatal(errA, errB, errC)
	}
	if string(a) != string(b) {
		t.Errorf("12.5 and 12.50 differ: %s vs %s", a, b)
	}
	if string(a) == string(c) {
		t.Errorf("12.5 and 12.51 are the same: %s", a)
	}
}

func orderSchema() *Schema {
	return &Schema{
		Revision: "orders.v3",
		Fields: map[string]*Field{
			"customer": {Type: TypeObject, Required: true, Fields: map[string]*Field{
				"id":   {Type: TypeString, Required: true},
				"tier": {Type: TypeEnum, Values: []string{"gold", "silver"}},
			}},
			"lines": {Type: TypeArray, Required: true, Items: &Field{Type: TypeObject, Fields: map[string]*Field{
				"sku":   {Type: TypeString, Required: true},
				"qty":   {Type: TypeInteger, Required: true, Positive: true},
				"price": {Type: TypeDecimal, Scale: 2},
			}}},
			"tags":   {Type: TypeArray, Items: &Field{Type: TypeEnum, Values: []string{"a", "b"}}},
			"gift":   {Type: TypeBoolean},
			"note":   {Type: TypeString, Null: NullKeep},
			"ref":    {Type: TypeString, Null: NullAbsent},
			"offset": {Type: TypeInteger},
			"meta":   {Type: TypeAny},
			"raw":    {Type: TypeArray},
		},
	}
}

func order(extra string) string {
	return `{"customer":{"tier":"gold","id":"c1"},"lines":[{"sku":"x","qty":2,"price":"1.5"}]` + extra + `}`
}

func TestSchemaNested(t *testing.T) {
	t.Parallel()
	const (
		sv   = CodeSchemaViolation
		bad  = CodeInvalidJSON
		base = `{"customer":{"id":"c1","tier":"gold"},"lines":[{"price":"1.50","qty":2,"sku":"x"}]`
	)
	runSchemaCases(t, orderSchema(), []schemaCase{
		{order(""), base + `}`, ""},
		{order(`,"tags":["b","a","b"],"gift":false`), `{"customer":{"id":"c1","tier":"gold"},"gift":false,"lines":[{"price":"1.50","qty":2,"sku":"x"}],"tags":["b","a","b"]}`, ""},
		{order(`,"lines":[]`), "", bad}, // duplicate "lines"
		{`{"customer":{"id":"c"},"lines":[]}`, `{"customer":{"id":"c"},"lines":[]}`, ""},
		{order(`,"meta":{"z":1.0,"a":[1E2,{"y":null,"x":"\u0041"}]}`), base + `,"meta":{"a":[1E2,{"x":"A","y":null}],"z":1.0}}`, ""},
		{order(`,"raw":[{"b":1,"a":2},3]`), base + `,"raw":[{"a":2,"b":1},3]}`, ""},
		// Null rules.
		{order(`,"note":null`), base + `,"note":null}`, ""},
		{order(`,"note":"n"`), base + `,"note":"n"}`, ""},
		{order(`,"ref":null`), base + `}`, ""},
		{order(`,"gift":null`), "", sv},
		{order(`,"tags":null`), "", sv},
		{order(`,"tags":["a",null]`), "", sv},
		{`{"customer":null,"lines":[]}`, "", sv},
		// Integers: exact, shortest form, 64 bits.
		{order(`,"offset":-0`), base + `,"offset":0}`, ""},
		{order(`,"offset":9223372036854775807`), base + `,"offset":9223372036854775807}`, ""},
		{order(`,"offset":-9223372036854775808`), base + `,"offset":-9223372036854775808}`, ""},
		{order(`,"offset":9223372036854775808`), "", sv},
		{order(`,"offset":-9223372036854775809`), "", sv},
		{order(`,"offset":1.0`), "", sv},
		{order(`,"offset":1e2`), "", sv},
		{order(`,"offset":"1"`), "", sv},
		{`{"customer":{"id":"c"},"lines":[{"sku":"x","qty":0}]}`, "", sv},
		{`{"customer":{"id":"c"},"lines":[{"sku":"x","qty":-1}]}`, "", sv},
		{`{"customer":{"id":"c"},"lines":[{"sku":"x","qty":1.0}]}`, "", sv},
		// Nested refusals.
		{`{"customer":{"id":"c","tier":"bronze"},"lines":[]}`, "", sv},
		{`{"customer":{"id":"c","tier":"Gold"},"lines":[]}`, "", sv},
		{`{"customer":{"id":"c","name":"n"},"lines":[]}`, "", sv},
		{`{"customer":{},"lines":[]}`, "", sv},
		{`{"customer":"c1","lines":[]}`, "", sv},
		{`{"customer":{"id":"c"}}`, "", sv},
		{`{"customer":{"id":"c"},"lines":{}}`, "", sv},
		{`{"customer":{"id":"c"},"lines":[{"sku":"x","qty":1,"price":"1.234"}]}`, "", sv},
		{`{"customer":{"id":"c"},"lines":[{"sku":"x"}]}`, "", sv},
		{`{"customer":{"id":"c"},"lines":[5]}`, "", sv},
		{order(`,"tags":["c"]`), "", sv},
		{order(`,"gift":"true"`), "", sv},
		{order(`,"gift":1`), "", sv},
		{order(`,"meta":{"a":1,"A":2}`), "", bad},
		{`{"customer":{"id":"c","Id":"d"},"lines":[]}`, "", bad},
		{`{"customer":{"id":"c"},"lines":[{"sku":"x","qty":1,"sku":"y"}]}`, "", bad},
	})
}

// TestSchemaNullKeepVersusAbsent: with NullKeep, null and absent are two
// different payloads; with NullAbsent they are the same.
func TestSchemaNullKeepVersusAbsent(t *testing.T) {
	t.Parallel()
	o := schemaOpts(orderSchema())
	canon := func(in string) string {
		out, err := o.Append(nil, []byte(in))
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		return string(out)
	}
	if canon(order(`,"note":null`)) == canon(order("")) {
		t.Error("note (null: keep): null and absent give the same payload")
	}
	if canon(order(`,"ref":null`)) != canon(order("")) {
		t.Error("ref (null: absent): null and absent give different payloads")
	}
}

func TestSchemaErrorPath(t *testing.T) {
	t.Parallel()
	_, err := schemaOpts(orderSchema()).Append(nil, []byte(`{"customer":{"id":"c"},"lines":[{"sku":"x","qty":1},{"sku":"y","qty":0}]}`))
	var ce *Error
	if !errors.As(err, &ce) || ce.Code != CodeSchemaViolation || !strings.Contains(ce.Reason, "$.lines[1].qty") || ce.Offset != -1 {
		t.Errorf("got %v, want SCHEMA_VIOLATION at $.lines[1].qty", err)
	}
	_, err = schemaOpts(paymentsSchema()).Append(nil, []byte(`{"amount":"1","currency":"EUR"}`))
	if !errors.As(err, &ce) || !strings.Contains(ce.Reason, "$.payee") {
		t.Errorf("got %v, want the missing member named", err)
	}
}

func TestParseSchemaFile(t *testing.T) {
	t.Parallel()
	f, err := os.Open("testdata/payments.v1.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s, err := ParseSchema(f)
	if err != nil {
		t.Fatal(err)
	}
	if want := paymentsSchema(); !reflect.DeepEqual(s, want) {
		t.Errorf("ParseSchema(payments.v1.json) = %+v, want %+v", s, want)
	}
}

func TestParseSchemaRefusals(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, in string }{
		{"unknown top-level member", `{"revision":"r","fields":{"a":{"type":"string"}},"strict":true}`},
		{"unknown field member", `{"revision":"r","fields":{"a":{"type":"string","maxlen":3}}}`},
		{"missing revision", `{"fields":{"a":{"type":"string"}}}`},
		{"empty revision", `{"revision":"","fields":{"a":{"type":"string"}}}`},
		{"bad pattern", `{"revision":"r","fields":{"a":{"type":"string","pattern":"[A-Z"}}}`},
		{"scale on a string", `{"revision":"r","fields":{"a":{"type":"string","scale":2}}}`},
		{"scale too large", `{"revision":"r","fields":{"a":{"type":"decimal","scale":19}}}`},
		{"negative scale", `{"revision":"r","fields":{"a":{"type":"decimal","scale":-1}}}`},
		{"unknown type", `{"revision":"r","fields":{"a":{"type":"money"}}}`},
		{"missing type", `{"revision":"r","fields":{"a":{"required":true}}}`},
		{"unknown null rule", `{"revision":"r","fields":{"a":{"type":"string","null":"allow"}}}`},
		{"positive on a string", `{"revision":"r","fields":{"a":{"type":"string","positive":true}}}`},
		{"max_length on a decimal", `{"revision":"r","fields":{"a":{"type":"decimal","max_length":3}}}`},
		{"pattern on an enum", `{"revision":"r","fields":{"a":{"type":"enum","values":["x"],"pattern":"x"}}}`},
		{"enum without values", `{"revision":"r","fields":{"a":{"type":"enum"}}}`},
		{"values without enum", `{"revision":"r","fields":{"a":{"type":"string","values":["x"]}}}`},
		{"object without fields", `{"revision":"r","fields":{"a":{"type":"object"}}}`},
		{"object with empty fields", `{"revision":"r","fields":{"a":{"type":"object","fields":{}}}}`},
		{"fields on a string", `{"revision":"r","fields":{"a":{"type":"string","fields":{"b":{"type":"string"}}}}}`},
		{"items on a string", `{"revision":"r","fields":{"a":{"type":"string","items":{"type":"string"}}}}`},
		{"bad items", `{"revision":"r","fields":{"a":{"type":"array","items":{"type":"string","scale":1}}}}`},
		{"bad nested field", `{"revision":"r","fields":{"a":{"type":"object","fields":{"b":{"type":"nope"}}}}}`},
		{"null field", `{"revision":"r","fields":{"a":null}}`},
		{"no fields", `{"revision":"r"}`},
		{"empty fields", `{"revision":"r","fields":{}}`},
		{"not JSON", `revision: r`},
		{"wrong type", `{"revision":1,"fields":{"a":{"type":"string"}}}`},
	}
	for _, tt := range tests {
		if s, err := ParseSchema(strings.NewReader(tt.in)); err == nil {
			t.Errorf("%s: accepted %+v", tt.name, s)
		}
	}
}

func TestSchemaValidateGoValue(t *testing.T) {
	t.Parallel()
	if err := paymentsSchema().Validate(); err != nil {
		t.Errorf("payments: %v", err)
	}
	if err := orderSchema().Validate(); err != nil {
		t.Errorf("orders: %v", err)
	}
	s := paymentsSchema()
	s.Fields["memo"].Scale = 2
	if s.Validate() == nil {
		t.Error("scale on a string accepted")
	}
	s = paymentsSchema()
	s.Revision = ""
	if s.Validate() == nil {
		t.Error("missing revision accepted")
	}
	s = paymentsSchema()
	s.Fields["currency"].Pattern = "(?P<x"
	if s.Validate() == nil {
		t.Error("bad pattern accepted")
	}
}
