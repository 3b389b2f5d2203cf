package statemachine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"
)

// The audit log: one record per management call, kept in the Pebble of the
// shard its namespace hashes to (the gateway picks it), under
// au|{namespace}\0{at:8BE}{id}. A record's time is the entry's (the
// proposer's clock, never one read here); its ID is the gateway's ULID.
// PruneAuditOp deletes records older than the cutoff it carries.

// Bounds of an audit record's fields; the state machine refuses a record
// over them (StatusInvalid), so no caller can grow a record without limit.
const (
	AuditSummaryMax = 512
	AuditPathMax    = 1024
	AuditFieldMax   = 256 // ID, key ID, key name, role, namespace, method, remote address
)

// AuditRecord is one audited call.
type AuditRecord struct {
	ID        string // ULID, made by the gateway
	At        int64  // Unix ns: the entry's time (set when applied)
	KeyID     string // "" for an anonymous caller or a refused unknown key
	KeyName   string
	Role      string
	Namespace string // the caller's namespace (the default one when unknown)
	Method    string
	Path      string // the concrete path, without the query
	Status    uint16 // the HTTP status answered
	Summary   string // what was acted on and how; never payloads or secrets
	Remote    string // the caller's address
}

func (r *AuditRecord) appendTo(b []byte) []byte {
	e := enc{b: b}
	e.u8(1)
	e.str(r.ID)
	e.varint(r.At)
	e.str(r.KeyID)
	e.str(r.KeyName)
	e.str(r.Role)
	e.str(r.Namespace)
	e.str(r.Method)
	e.str(r.Path)
	e.uvarint(uint64(r.Status))
	e.str(r.Summary)
	e.str(r.Remote)
	return e.b
}

func (r *AuditRecord) decode(d *dec) {
	if d.u8() != 1 {
		d.fail()
		return
	}
	r.ID = d.str()
	r.At = d.varint()
	r.KeyID = d.str()
	r.KeyName = d.str()
	r.Role = d.str()
	r.Namespace = d.str()
	r.Method = d.str()
	r.Path = d.str()
	st := d.uvarint()
	if st > 999 {
		d.fail()
		return
	}
	r.Status = uint16(st)
	r.Summary = d.str()
	r.Remote = d.str()
}

// check says what makes r unfit to store, or "".
func (r *AuditRecord) check() string {
	switch {
	case r.ID == "" || r.Namespace == "" || r.Method == "" || r.Path == "":
		return "an audit record needs an id, a namespace, a method and a path"
	case strings.IndexByte(r.Namespace, 0) >= 0:
		return "an audit record's namespace may not contain a NUL byte"
	case len(r.Summary) > AuditSummaryMax, len(r.Path) > AuditPathMax:
		return fmt.Sprintf("an audit record's summary is at most %d bytes and its path %d", AuditSummaryMax, AuditPathMax)
	}
	for _, f := range []string{r.ID, r.KeyID, r.KeyName, r.Role, r.Namespace, r.Method, r.Remote} {
		if len(f) > AuditFieldMax {
			return fmt.Sprintf("an audit record's fields are at most %d bytes", AuditFieldMax)
		}
	}
	return ""
}

// after reports whether r sorts after (at, id): newer, or as new with a
// greater ID.
func (r *AuditRecord) after(at int64, id string) bool {
	return r.At > at || r.At == at && r.ID > id
}

func auditPrefix(ns string) []byte {
	k := make([]byte, 0, len(pfxAudit)+len(ns)+1)
	k = append(k, pfxAudit...)
	k = append(k, ns...)
	return append(k, 0)
}

func auditKey(ns string, at int64, id string) []byte {
	k := auditPrefix(ns)
	k = binary.BigEndian.AppendUint64(k, uint64(at))
	return append(k, id...)
}

// auditAt is the key of namespace ns's first record at time at or later.
func auditAt(ns string, at int64) []byte {
	return binary.BigEndian.AppendUint64(auditPrefix(ns), uint64(at))
}

// iterMaker is what opens iterators: the DB (lookups) or an indexed batch
// (apply, which must see its own writes).
type iterMaker interface {
	NewIter(*pebble.IterOptions) (*pebble.Iterator, error)
}

// auditNamespaces lists the namespaces that have audit records, in key
// order, one seek per namespace.
func auditNamespaces(r iterMaker) ([]string, error) {
	pfx := []byte(pfxAudit)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: pfx, UpperBound: prefixEnd(pfx)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []string
	for ok := it.First(); ok; {
		k := it.Key()[len(pfx):]
		end := bytes.IndexByte(k, 0)
		if end < 0 {
			return nil, fmt.Errorf("corrupt audit key %q", it.Key())
		}
		ns := string(k[:end])
		out = append(out, ns)
		ok = it.SeekGE(prefixEnd(auditPrefix(ns)))
	}
	return out, it.Error()
}

// AuditOp appends one audit record; its time is the entry's.
type AuditOp struct{ Record AuditRecord }

// Code implements Op.
func (*AuditOp) Code() OpCode                 { return OpAudit }
func (o *AuditOp) appendBody(b []byte) []byte { return o.Record.appendTo(b) }
func (o *AuditOp) decode(d *dec)              { o.Record.decode(d) }

// PruneAuditOp deletes audit records older than Before (Unix ns), at most
// Limit of them (0: 5,000); the shard leader proposes it with the cutoff
// its retention gives.
type PruneAuditOp struct {
	Before int64
	Limit  uint32
}

// Code implements Op.
func (*PruneAuditOp) Code() OpCode { return OpPruneAudit }
func (o *PruneAuditOp) appendBody(b []byte) []byte {
	e := enc{b: b}
	e.varint(o.Before)
	e.uvarint(uint64(o.Limit))
	return e.b
}
func (o *PruneAuditOp) decode(d *dec) {
	o.Before = d.varint()
	o.Limit = uint32(d.uvarint())
}

func (a *applier) audit(o *AuditOp) Result {
	r := o.Record
	if msg := r.check(); msg != "" {
		return Result{Status: StatusInvalid, Message: msg}
	}
	r.At = a.now
	a.set(auditKey(r.Namespace, r.At, r.ID), r.appendTo(nil))
	return Result{}
}

func (a *applier) pruneAudit(o *PruneAuditOp) Result {
	limit := int(o.Limit)
	if limit <= 0 {
		limit = 5000
	}
	nss, err := auditNamespaces(a.b)
	if err != nil {
		a.fail(err)
		return Result{}
	}
	n := 0
	for _, ns := range nss {
		if n == limit {
			break
		}
		it, err := a.b.NewIter(&pebble.IterOptions{LowerBound: auditPrefix(ns), UpperBound: auditAt(ns, o.Before)})
		if err != nil {
			a.fail(err)
			return Result{}
		}
		var keys [][]byte
		for ok := it.First(); ok && n+len(keys) < limit; ok = it.Next() {
			keys = append(keys, slices.Clone(it.Key()))
		}
		if err := it.Close(); err != nil {
			a.fail(err)
			return Result{}
		}
		for _, k := range keys {
			a.del(k)
		}
		n += len(keys)
	}
	return Result{Count: uint32(n)}
}

// AuditScanMax bounds how many records one AuditQuery examines per
// namespace; a page that stops there says where (AuditPage.Stop) and the
// caller goes on from it.
const AuditScanMax = 10000

// AuditQuery lists audit records, newest first. Namespace "" reads every
// namespace of the shard; the other filters are ANDed (empty or zero: any).
// Since is inclusive and Until exclusive (Unix ns); (Before, BeforeID),
// when Before is set, is the cursor: only records older than it. The
// answer is AuditPage.
type AuditQuery struct {
	Namespace  string
	KeyID      string
	Method     string
	PathPrefix string
	Status     int
	Since      int64
	Until      int64
	Before     int64
	BeforeID   string
	Limit      int
}

func (q *AuditQuery) match(r *AuditRecord) bool {
	return (q.KeyID == "" || r.KeyID == q.KeyID) &&
		(q.Method == "" || r.Method == q.Method) &&
		(q.PathPrefix == "" || strings.HasPrefix(r.Path, q.PathPrefix)) &&
		(q.Status == 0 || int(r.Status) == q.Status)
}

// AuditPage is one page of audit records, newest first. When More is set
// the next page starts below (StopAt, StopID): every record above it that
// matches is in Records (fewer than the limit when the scan bound was hit).
type AuditPage struct {
	Records []AuditRecord
	More    bool
	StopAt  int64
	StopID  string
}

func (s *StateMachine) listAudit(q AuditQuery) (AuditPage, error) {
	if q.Limit < 1 {
		q.Limit = 50
	}
	nss := []string{q.Namespace}
	if q.Namespace == "" {
		var err error
		if nss, err = auditNamespaces(s.db); err != nil {
			return AuditPage{}, err
		}
	}
	pages := make([]AuditPage, 0, len(nss))
	for _, ns := range nss {
		p, err := s.listAuditOf(ns, &q)
		if err != nil {
			return AuditPage{}, err
		}
		pages = append(pages, p)
	}
	return MergeAuditPages(pages, q.Limit), nil
}

// listAuditOf reads one namespace's page.
func (s *StateMachine) listAuditOf(ns string, q *AuditQuery) (AuditPage, error) {
	lower := auditPrefix(ns)
	if q.Since > 0 {
		lower = auditAt(ns, q.Since)
	}
	upper := prefixEnd(auditPrefix(ns))
	if q.Until > 0 {
		upper = auditAt(ns, q.Until)
	}
	if q.Before != 0 {
		if c := auditKey(ns, q.Before, q.BeforeID); bytes.Compare(c, upper) < 0 {
			upper = c
		}
	}
	var page AuditPage
	if bytes.Compare(lower, upper) >= 0 {
		return page, nil
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return page, err
	}
	defer it.Close()
	scanned := 0
	for ok := it.Last(); ok; ok = it.Prev() {
		var r AuditRecord
		d := dec{b: it.Value()}
		r.decode(&d)
		if d.err != nil {
			return page, fmt.Errorf("corrupt audit record %q: %w", it.Key(), d.err)
		}
		scanned++
		if q.match(&r) {
			page.Records = append(page.Records, r)
		}
		if len(page.Records) == q.Limit || scanned == AuditScanMax {
			page.More = it.Prev()
			page.StopAt, page.StopID = r.At, r.ID
			break
		}
	}
	return page, it.Error()
}

// MergeAuditPages merges pages of disjoint record sets (namespaces, or
// shards) into one page of at most limit records, newest first. A page
// that stopped early covers only the records above its stop, so the
// merged page goes down to the highest of those stops and no further.
func MergeAuditPages(pages []AuditPage, limit int) AuditPage {
	var out AuditPage
	var stopped bool
	for _, p := range pages {
		if p.More && (!stopped || p.stopAfter(out.StopAt, out.StopID)) {
			out.StopAt, out.StopID, stopped = p.StopAt, p.StopID, true
		}
	}
	for _, p := range pages {
		for i := range p.Records {
			r := &p.Records[i]
			if stopped && !r.after(out.StopAt, out.StopID) && (r.At != out.StopAt || r.ID != out.StopID) {
				continue // below the lowest point every page has reached
			}
			out.Records = append(out.Records, *r)
		}
	}
	slices.SortFunc(out.Records, func(x, y AuditRecord) int {
		switch {
		case x.after(y.At, y.ID):
			return -1
		case y.after(x.At, x.ID):
			return 1
		}
		return 0
	})
	out.More = stopped
	if len(out.Records) > limit {
		// Everything above the last record kept is in the page.
		out.Records = out.Records[:limit]
		last := &out.Records[limit-1]
		out.More, out.StopAt, out.StopID = true, last.At, last.ID
	}
	return out
}

// stopAfter reports whether p stopped above (at, id).
func (p *AuditPage) stopAfter(at int64, id string) bool {
	return p.StopAt > at || p.StopAt == at && p.StopID > id
}
