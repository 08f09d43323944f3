package registry

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"
)

// The tenant stream: what TenantCopier.ExportTenant writes and
// ImportTenant reads. JSON lines:
//
//	{"kind":"header","header":{"format":"idem.tenant","version":1,"tenant_hash":"…","counts":{…}}}
//	{"kind":"record","record":{…}}          one per record, then its rows:
//	{"kind":"effect","effect":{…}}          …, "lookup", "reconciliation",
//	{"kind":"outbox","outbox":{…}}          "settlement", "audit"
//	{"kind":"end","digest":"…"}
//
// The digest is the hex SHA-256 of every byte before the end line; the
// header's counts must match the rows. A reader refuses a stream of
// another format or version, a truncated one, one whose digest or counts
// do not match, and anything after the end line. Byte strings are base64
// (encoding/json), times RFC 3339 in UTC with microseconds (what both
// drivers store), durations microseconds. Rows are as stored: a sealed
// body, request, answer or payload stays sealed, with its key ID.
const (
	TenantStreamFormat  = "idem.tenant"
	TenantStreamVersion = 1
)

// ErrTenantStream wraps every refusal of a tenant stream that is not
// what ExportTenant wrote (a different format or version, truncated,
// altered).
var ErrTenantStream = errors.New("registry: not a valid tenant stream")

// ErrTenantImportConflict: ImportTenant met a scope (or one of its rows)
// that the target registry holds with other content than the stream's.
// Nothing was imported.
var ErrTenantImportConflict = errors.New("registry: the target registry holds different content for an imported operation")

// TenantRecord is a record row as stored.
type TenantRecord struct {
	Scope          []byte     `json:"scope"`
	OperationID    string     `json:"operation_id"`
	Operation      string     `json:"operation"`
	Owner          []byte     `json:"owner"`
	Fingerprint    []byte     `json:"fingerprint"`
	Contract       string     `json:"contract"`
	State          string     `json:"state"`
	OwnerGen       int64      `json:"owner_gen"`
	WriterEpoch    int64      `json:"writer_epoch"`
	LeaseUntil     time.Time  `json:"lease_until"`
	ExpiresAt      time.Time  `json:"expires_at"`
	CreatedAt      time.Time  `json:"created_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
	RespStatus     *int64     `json:"resp_status,omitempty"`
	RespMediaType  *string    `json:"resp_media_type,omitempty"`
	RespLocation   *string    `json:"resp_location,omitempty"`
	RespETag       *string    `json:"resp_etag,omitempty"`
	RespBody       []byte     `json:"resp_body,omitempty"`
	RespDigest     []byte     `json:"resp_digest,omitempty"`
	RespKey        *string    `json:"resp_key,omitempty"`
	RetiredAt      *time.Time `json:"retired_at,omitempty"`
	TombstoneUntil *time.Time `json:"tombstone_until,omitempty"`
	TombstoneTTL   *int64     `json:"tombstone_ttl_us,omitempty"`
	TenantHash     []byte     `json:"tenant_hash"`
}

// TenantEffect is an effect attempt row as stored.
type TenantEffect struct {
	OperationID   string    `json:"operation_id"`
	Name          string    `json:"name"`
	DownstreamKey string    `json:"downstream_key"`
	OwnerGen      int64     `json:"owner_gen"`
	Handle        *string   `json:"handle,omitempty"`
	Result        *string   `json:"result,omitempty"`
	CreatedAt     time.Time `json:"created_at"`
	UpdatedAt     time.Time `json:"updated_at"`
	Request       []byte    `json:"request,omitempty"`
	Answer        []byte    `json:"answer,omitempty"`
	RequestKey    *string   `json:"request_key,omitempty"`
	AnswerKey     *string   `json:"answer_key,omitempty"`
}

// TenantLookup is a downstream lookup row, in the order they were logged.
type TenantLookup struct {
	OperationID   string    `json:"operation_id"`
	Effect        string    `json:"effect"`
	DownstreamKey string    `json:"downstream_key"`
	Answer        string    `json:"answer"`
	Handle        string    `json:"handle"`
	Detail        string    `json:"detail"`
	Actor         string    `json:"actor"`
	At            time.Time `json:"at"`
}

// TenantReconciliation is a reconciliation log row, in log order.
type TenantReconciliation struct {
	OperationID string    `json:"operation_id"`
	Outcome     string    `json:"outcome"`
	Method      string    `json:"method"`
	Actor       string    `json:"actor"`
	Evidence    string    `json:"evidence"`
	CreatedAt   time.Time `json:"created_at"`
}

// TenantSettlement is a pending settlement row.
type TenantSettlement struct {
	OperationID string     `json:"operation_id"`
	Outcome     string     `json:"outcome"`
	Handle      string     `json:"handle"`
	Evidence    string     `json:"evidence"`
	RequestedBy string     `json:"requested_by"`
	RequestedAt time.Time  `json:"requested_at"`
	ApprovedBy  *string    `json:"approved_by,omitempty"`
	ApprovedAt  *time.Time `json:"approved_at,omitempty"`
}

// TenantOutbox is an outbox message row, in storage order; its sequence
// number is the target's own.
type TenantOutbox struct {
	MessageID     string     `json:"message_id"`
	OperationID   string     `json:"operation_id"`
	Topic         string     `json:"topic"`
	Payload       []byte     `json:"payload"`
	PayloadKey    *string    `json:"payload_key,omitempty"`
	CreatedAt     time.Time  `json:"created_at"`
	ClaimedUntil  *time.Time `json:"claimed_until,omitempty"`
	PublishedAt   *time.Time `json:"published_at,omitempty"`
	Attempts      int64      `json:"attempts"`
	LastError     *string    `json:"last_error,omitempty"`
	LastAttemptAt *time.Time `json:"last_attempt_at,omitempty"`
	DeadAt        *time.Time `json:"dead_at,omitempty"`
	TraceParent   *string    `json:"trace_parent,omitempty"` // Message.Trace
}

// TenantAudit is an audit log entry about the operation, in log order;
// its sequence number is the target's own.
type TenantAudit struct {
	OperationID string    `json:"operation_id"`
	At          time.Time `json:"at"`
	Actor       string    `json:"actor"`
	Action      string    `json:"action"`
	Detail      string    `json:"detail"`
}

// TenantOperation is one record and every row hanging off its operation.
type TenantOperation struct {
	Record          TenantRecord
	Effects         []TenantEffect
	Lookups         []TenantLookup
	Reconciliations []TenantReconciliation
	Settlements     []TenantSettlement
	Outbox          []TenantOutbox
	Audit           []TenantAudit
}

// TenantDump is a tenant's rows in one registry, by operation.
type TenantDump struct {
	TenantHash [32]byte
	Operations []TenantOperation
}

// Counts counts the dump's rows. The dump has no clock: InFlight counts
// every RESERVED or EXECUTING record that is not a tombstone, whatever
// its lease; Unattributed is always 0 (a dump holds one tenant's records).
func (d TenantDump) Counts() TenantCounts {
	var c TenantCounts
	for _, op := range d.Operations {
		c.Records++
		switch {
		case op.Record.RetiredAt != nil:
			c.Tombstones++
		case op.Record.State == "UNKNOWN":
			c.Unknown++
		case op.Record.State == "RESERVED" || op.Record.State == "EXECUTING":
			c.InFlight++
		}
		c.Effects += int64(len(op.Effects))
		c.Outbox += int64(len(op.Outbox))
	}
	return c
}

// GroupTenantRows builds a dump from a tenant's rows read table by table:
// each row goes to its record's operation; a row whose operation has no
// record is an error.
func GroupTenantRows(hash [32]byte, recs []TenantRecord, effs []TenantEffect, looks []TenantLookup,
	recons []TenantReconciliation, sets []TenantSettlement, outs []TenantOutbox, audit []TenantAudit) (TenantDump, error) {
	d := TenantDump{TenantHash: hash, Operations: make([]TenantOperation, len(recs))}
	at := make(map[string]*TenantOperation, len(recs))
	for i, r := range recs {
		d.Operations[i].Record = r
		at[r.OperationID] = &d.Operations[i]
	}
	var missing error
	find := func(id string) *TenantOperation {
		op := at[id]
		if op == nil && missing == nil {
			missing = fmt.Errorf("registry: a row of operation %s has no record among the tenant's", id)
		}
		if op == nil {
			return &TenantOperation{}
		}
		return op
	}
	for _, x := range effs {
		op := find(x.OperationID)
		op.Effects = append(op.Effects, x)
	}
	for _, x := range looks {
		op := find(x.OperationID)
		op.Lookups = append(op.Lookups, x)
	}
	for _, x := range recons {
		op := find(x.OperationID)
		op.Reconciliations = append(op.Reconciliations, x)
	}
	for _, x := range sets {
		op := find(x.OperationID)
		op.Settlements = append(op.Settlements, x)
	}
	for _, x := range outs {
		op := find(x.OperationID)
		op.Outbox = append(op.Outbox, x)
	}
	for _, x := range audit {
		op := find(x.OperationID)
		op.Audit = append(op.Audit, x)
	}
	return d, missing
}

// tenantHeader is the stream's first line.
type tenantHeader struct {
	Format     string       `json:"format"`
	Version    int          `json:"version"`
	TenantHash string       `json:"tenant_hash"`
	Counts     TenantCounts `json:"counts"`
}

// tenantLine is one line of the stream.
type tenantLine struct {
	Kind           string                `json:"kind"`
	Header         *tenantHeader         `json:"header,omitempty"`
	Record         *TenantRecord         `json:"record,omitempty"`
	Effect         *TenantEffect         `json:"effect,omitempty"`
	Lookup         *TenantLookup         `json:"lookup,omitempty"`
	Reconciliation *TenantReconciliation `json:"reconciliation,omitempty"`
	Settlement     *TenantSettlement     `json:"settlement,omitempty"`
	Outbox         *TenantOutbox         `json:"outbox,omitempty"`
	Audit          *TenantAudit          `json:"audit,omitempty"`
	Digest         string                `json:"digest,omitempty"`
}

// WriteTenantStream writes d to w as a tenant stream (see above) and
// returns its counts. Times are written in UTC at microseconds.
func WriteTenantStream(w io.Writer, d TenantDump) (TenantCounts, error) {
	counts := d.Counts()
	h := sha256.New()
	bw := bufio.NewWriter(w)
	out := io.MultiWriter(bw, h)
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	put := func(l tenantLine) error { return enc.Encode(l) }
	if err := put(tenantLine{Kind: "header", Header: &tenantHeader{Format: TenantStreamFormat, Version: TenantStreamVersion,
		TenantHash: hex.EncodeToString(d.TenantHash[:]), Counts: counts}}); err != nil {
		return TenantCounts{}, err
	}
	for _, op := range d.Operations {
		op = op.normalized()
		if err := put(tenantLine{Kind: "record", Record: &op.Record}); err != nil {
			return TenantCounts{}, err
		}
		for i := range op.Effects {
			if err := put(tenantLine{Kind: "effect", Effect: &op.Effects[i]}); err != nil {
				return TenantCounts{}, err
			}
		}
		for i := range op.Lookups {
			if err := put(tenantLine{Kind: "lookup", Lookup: &op.Lookups[i]}); err != nil {
				return TenantCounts{}, err
			}
		}
		for i := range op.Reconciliations {
			if err := put(tenantLine{Kind: "reconciliation", Reconciliation: &op.Reconciliations[i]}); err != nil {
				return TenantCounts{}, err
			}
		}
		for i := range op.Settlements {
			if err := put(tenantLine{Kind: "settlement", Settlement: &op.Settlements[i]}); err != nil {
				return TenantCounts{}, err
			}
		}
		for i := range op.Outbox {
			if err := put(tenantLine{Kind: "outbox", Outbox: &op.Outbox[i]}); err != nil {
				return TenantCounts{}, err
			}
		}
		for i := range op.Audit {
			if err := put(tenantLine{Kind: "audit", Audit: &op.Audit[i]}); err != nil {
				return TenantCounts{}, err
			}
		}
	}
	end := json.NewEncoder(bw)
	if err := end.Encode(tenantLine{Kind: "end", Digest: hex.EncodeToString(h.Sum(nil))}); err != nil {
		return TenantCounts{}, err
	}
	return counts, bw.Flush()
}

// ReadTenantStream reads a whole tenant stream and checks it: format and
// version, every line's kind, the digest, the counts, nothing after the
// end. Every refusal wraps ErrTenantStream.
func ReadTenantStream(r io.Reader) (TenantDump, error) {
	bad := func(format string, args ...any) (TenantDump, error) {
		return TenantDump{}, fmt.Errorf("%w: %s", ErrTenantStream, fmt.Sprintf(format, args...))
	}
	br := bufio.NewReader(r)
	h := sha256.New()
	var d TenantDump
	var header *tenantHeader
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if err == io.EOF {
			return bad("ends at line %d without its end line (truncated?)", n)
		}
		if err != nil {
			return TenantDump{}, err
		}
		var l tenantLine
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil {
			return bad("line %d: %v", n, err)
		}
		if n == 1 != (l.Kind == "header") {
			return bad("line %d is a %q line; the header comes first and only once", n, l.Kind)
		}
		last := len(d.Operations) - 1
		switch {
		case l.Kind == "header" && l.Header != nil:
			header = l.Header
			if header.Format != TenantStreamFormat || header.Version != TenantStreamVersion {
				return bad("format %q version %d, want %q version %d", header.Format, header.Version, TenantStreamFormat, TenantStreamVersion)
			}
			raw, err := hex.DecodeString(header.TenantHash)
			if err != nil || len(raw) != 32 {
				return bad("tenant hash %q", header.TenantHash)
			}
			copy(d.TenantHash[:], raw)
		case l.Kind == "record" && l.Record != nil:
			if !bytes.Equal(l.Record.TenantHash, d.TenantHash[:]) {
				return bad("line %d: record %s is of another tenant", n, l.Record.OperationID)
			}
			d.Operations = append(d.Operations, TenantOperation{Record: *l.Record})
		case l.Kind == "end":
			if got := hex.EncodeToString(h.Sum(nil)); l.Digest != got {
				return bad("digest %s, the content's is %s", l.Digest, got)
			}
			if _, err := br.ReadByte(); err != io.EOF {
				return bad("content after the end line")
			}
			if got := d.Counts(); got != header.Counts {
				return bad("counts %+v, the header says %+v", got, header.Counts)
			}
			return d, nil
		case last < 0:
			return bad("line %d: a %q line before any record", n, l.Kind)
		case l.Kind == "effect" && l.Effect != nil && l.Effect.OperationID == d.Operations[last].Record.OperationID:
			d.Operations[last].Effects = append(d.Operations[last].Effects, *l.Effect)
		case l.Kind == "lookup" && l.Lookup != nil && l.Lookup.OperationID == d.Operations[last].Record.OperationID:
			d.Operations[last].Lookups = append(d.Operations[last].Lookups, *l.Lookup)
		case l.Kind == "reconciliation" && l.Reconciliation != nil && l.Reconciliation.OperationID == d.Operations[last].Record.OperationID:
			d.Operations[last].Reconciliations = append(d.Operations[last].Reconciliations, *l.Reconciliation)
		case l.Kind == "settlement" && l.Settlement != nil && l.Settlement.OperationID == d.Operations[last].Record.OperationID:
			d.Operations[last].Settlements = append(d.Operations[last].Settlements, *l.Settlement)
		case l.Kind == "outbox" && l.Outbox != nil && l.Outbox.OperationID == d.Operations[last].Record.OperationID:
			d.Operations[last].Outbox = append(d.Operations[last].Outbox, *l.Outbox)
		case l.Kind == "audit" && l.Audit != nil && l.Audit.OperationID == d.Operations[last].Record.OperationID:
			d.Operations[last].Audit = append(d.Operations[last].Audit, *l.Audit)
		default:
			return bad("line %d: a %q line that is not one of the record before it", n, l.Kind)
		}
		h.Write(line)
	}
}

// PlanTenantImport compares what a stream brings (in) with what the
// target registry already holds of the tenant (have) and returns the
// operations to insert: an operation the target lacks is inserted; one it
// holds with the same content, its rows included, is skipped; one it
// holds with other content is an error wrapping ErrTenantImportConflict.
func PlanTenantImport(in, have TenantDump) ([]TenantOperation, error) {
	held := make(map[string]TenantOperation, len(have.Operations))
	for _, op := range have.Operations {
		held[string(op.Record.Scope)] = op.normalized()
	}
	var insert []TenantOperation
	for _, op := range in.Operations {
		op = op.normalized()
		old, ok := held[string(op.Record.Scope)]
		if !ok {
			insert = append(insert, op)
			continue
		}
		a, err := json.Marshal(op)
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(old)
		if err != nil {
			return nil, err
		}
		if !bytes.Equal(a, b) {
			return nil, fmt.Errorf("%w: operation %s (the target's is %s)", ErrTenantImportConflict, op.Record.OperationID, old.Record.OperationID)
		}
	}
	return insert, nil
}

// normalized returns op with its times in UTC at microseconds and the
// byte strings a driver may read as nil or empty made alike (a response
// body and a payload are never NULL), so that rows read from either
// driver compare and encode alike.
func (op TenantOperation) normalized() TenantOperation {
	r := &op.Record
	for _, t := range []*time.Time{&r.LeaseUntil, &r.ExpiresAt, &r.CreatedAt, &r.UpdatedAt} {
		*t = micro(*t)
	}
	r.RetiredAt, r.TombstoneUntil = microPtr(r.RetiredAt), microPtr(r.TombstoneUntil)
	if r.RespStatus != nil && r.RespBody == nil {
		r.RespBody = []byte{}
	}
	op.Effects = slices.Clone(op.Effects)
	for i := range op.Effects {
		e := &op.Effects[i]
		e.CreatedAt, e.UpdatedAt = micro(e.CreatedAt), micro(e.UpdatedAt)
	}
	op.Lookups = slices.Clone(op.Lookups)
	for i := range op.Lookups {
		op.Lookups[i].At = micro(op.Lookups[i].At)
	}
	op.Reconciliations = slices.Clone(op.Reconciliations)
	for i := range op.Reconciliations {
		op.Reconciliations[i].CreatedAt = micro(op.Reconciliations[i].CreatedAt)
	}
	op.Settlements = slices.Clone(op.Settlements)
	for i := range op.Settlements {
		s := &op.Settlements[i]
		s.RequestedAt, s.ApprovedAt = micro(s.RequestedAt), microPtr(s.ApprovedAt)
	}
	op.Outbox = slices.Clone(op.Outbox)
	for i := range op.Outbox {
		m := &op.Outbox[i]
		m.CreatedAt = micro(m.CreatedAt)
		m.ClaimedUntil, m.PublishedAt = microPtr(m.ClaimedUntil), microPtr(m.PublishedAt)
		m.LastAttemptAt, m.DeadAt = microPtr(m.LastAttemptAt), microPtr(m.DeadAt)
		if m.Payload == nil {
			m.Payload = []byte{}
		}
	}
	op.Audit = slices.Clone(op.Audit)
	for i := range op.Audit {
		op.Audit[i].At = micro(op.Audit[i].At)
	}
	return op
}

func micro(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

func microPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := micro(*t)
	return &u
}
