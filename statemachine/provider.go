package statemachine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/corvohq/corvo/router"
)

// Providers (issue 20): a model provider's rate limits — requests, input
// tokens and output tokens per minute — shared by every queue linked to
// it, whatever shard the queue lives on.
//
// A split budget. Every shard holds every provider (the gateway proposes
// a SetProviderOp to each shard) and keeps its own one-minute windows of
// what its linked queues took: one pr| key per job handed out, one pt|
// key per usage report with the tokens it added. A shard may use its
// share of each limit: the limit split equally over the shards that host
// at least one linked queue (the provider's members), the remainder going
// one unit each to the lowest-numbered members, so the shares add up to
// the limit exactly — or the share a rebalance by demand gave it
// (ProviderShareOp, providerplan.go). A shard learns which shards are members from
// ProviderMemberOps: a LinkProviderOp on the queue's shard changes that
// shard's own membership when its count of linked queues goes from 0 to
// 1 or back, under a new generation, and the gateway proposes the change
// to every shard; a shard keeps the highest generation it has seen of
// each member, so the changes may arrive in any order. Between a link and
// its propagation the shards may briefly count different members.
//
// Fetch honours the tighter of the queue's own limits and the provider's:
// while the shard's request window holds its share, or a token window's
// sum reaches its share, the provider's queues hand out nothing, and the
// queue signal's BlockedUntil says when the window frees. Tokens are not
// known before a job runs, so a token window only stops fetches once the
// reported usage has reached the share.

// ProviderWindowNs is the length of a provider's sliding windows (a
// minute: its limits are per minute).
const ProviderWindowNs = int64(60e9)

// Bounds of a provider: its name is 1–MaxProviderName bytes of letters,
// digits, '.', '_' and '-'; each limit is 0 (none) to MaxProviderLimit.
const (
	MaxProviderName  = 64
	MaxProviderLimit = 1 << 40
)

// Provider is a model provider's limits per minute (0: no limit).
type Provider struct {
	Namespace string // the stored namespace name ("" is the default)
	Name      string
	RPM       int64 // requests (jobs handed out) per minute
	InputTPM  int64 // input tokens per minute
	OutputTPM int64 // output tokens per minute
}

// ID is the provider's key: its namespace and name.
func (p *Provider) ID() string { return providerID(p.Namespace, p.Name) }

func providerID(ns, name string) string { return ns + "\x00" + name }

// queueProviderID is the ID of the provider name as queue's namespace
// knows it.
func queueProviderID(queue, name string) string {
	ns, _ := router.SplitQueue(queue)
	if ns == router.DefaultNamespace {
		ns = ""
	}
	return providerID(ns, name)
}

// CheckProviderName reports what is wrong with a provider's name.
func CheckProviderName(name string) error {
	if name == "" || len(name) > MaxProviderName {
		return fmt.Errorf("a provider's name is 1–%d bytes", MaxProviderName)
	}
	for _, c := range []byte(name) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			return fmt.Errorf("provider name %q has an invalid character %q (allowed: letters, digits, . _ -)", name, c)
		}
	}
	return nil
}

// Check reports what is wrong with a provider (nil: nothing).
func (p *Provider) Check() error {
	if err := CheckProviderName(p.Name); err != nil {
		return err
	}
	if p.Namespace != "" {
		if err := router.ValidateNamespace(p.Namespace); err != nil || p.Namespace == router.DefaultNamespace {
			return fmt.Errorf("provider namespace %q is not a namespace's stored name", p.Namespace)
		}
	}
	for _, v := range []int64{p.RPM, p.InputTPM, p.OutputTPM} {
		if v < 0 || v > MaxProviderLimit {
			return fmt.Errorf("provider limits are 0–%d", int64(MaxProviderLimit))
		}
	}
	if p.RPM == 0 && p.InputTPM == 0 && p.OutputTPM == 0 {
		return errors.New("a provider needs rpm_limit, input_tpm_limit or output_tpm_limit")
	}
	return nil
}

// ProviderMember is one shard's membership of a provider's pool: In when
// it hosts a linked queue, as of generation Gen of that shard's links.
type ProviderMember struct {
	Name  string // the provider's name (in a Result; empty in a record)
	Shard uint32
	Gen   uint64
	In    bool
}

// providerRec is a provider as a shard stores it (pv|{id}): its limits,
// how many of this shard's queues are linked to it, and which shards
// share its pool, sorted by shard.
type providerRec struct {
	Provider
	Linked  uint32
	Members []ProviderMember
	// A rebalanced share (ProviderShareOp): its generation (0: never
	// set), its limits (nil: none, the equal split applies) and the
	// members it was set for.
	ShareGen uint64
	Explicit *ProviderShare
	Basis    []uint32
}

// providerVersion 2 adds the rebalanced share; a record without one is
// written as version 1, as before.
const providerVersion = 1

func (r *providerRec) appendTo(b []byte) []byte {
	e := enc{b: b}
	if r.ShareGen == 0 {
		e.u8(providerVersion)
	} else {
		e.u8(providerVersion + 1)
	}
	e.str(r.Namespace)
	e.str(r.Name)
	e.varint(r.RPM)
	e.varint(r.InputTPM)
	e.varint(r.OutputTPM)
	e.uvarint(uint64(r.Linked))
	e.uvarint(uint64(len(r.Members)))
	for _, m := range r.Members {
		e.uvarint(uint64(m.Shard))
		e.uvarint(m.Gen)
		e.boolean(m.In)
	}
	if r.ShareGen != 0 {
		e.uvarint(r.ShareGen)
		e.boolean(r.Explicit != nil)
		if r.Explicit != nil {
			e.varint(r.Explicit.RPM)
			e.varint(r.Explicit.InputTPM)
			e.varint(r.Explicit.OutputTPM)
		}
		e.uvarint(uint64(len(r.Basis)))
		for _, m := range r.Basis {
			e.uvarint(uint64(m))
		}
	}
	return e.b
}

func (r *providerRec) decode(d *dec) {
	v := d.u8()
	if v != providerVersion && v != providerVersion+1 {
		d.fail()
		return
	}
	r.Namespace = d.str()
	r.Name = d.str()
	r.RPM = d.varint()
	r.InputTPM = d.varint()
	r.OutputTPM = d.varint()
	r.Linked = uint32(d.uvarint())
	n := d.uvarint()
	if n > 1<<16 {
		d.fail()
		return
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		r.Members = append(r.Members, ProviderMember{Shard: uint32(d.uvarint()), Gen: d.uvarint(), In: d.boolean()})
	}
	if v == providerVersion {
		return
	}
	r.ShareGen = d.uvarint()
	if d.boolean() {
		r.Explicit = &ProviderShare{RPM: d.varint(), InputTPM: d.varint(), OutputTPM: d.varint()}
	}
	n = d.uvarint()
	if n > 1<<16 {
		d.fail()
		return
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		r.Basis = append(r.Basis, uint32(d.uvarint()))
	}
}

// member returns shard's entry (a zero one, not In, when it has none).
func (r *providerRec) member(shard uint32) ProviderMember {
	for _, m := range r.Members {
		if m.Shard == shard {
			return ProviderMember{Name: r.Name, Shard: shard, Gen: m.Gen, In: m.In}
		}
	}
	return ProviderMember{Name: r.Name, Shard: shard}
}

// putMember stores shard's entry, keeping Members sorted.
func (r *providerRec) putMember(m ProviderMember) {
	m.Name = ""
	i, found := slices.BinarySearchFunc(r.Members, m.Shard, func(x ProviderMember, s uint32) int { return int(x.Shard) - int(s) })
	if found {
		r.Members[i] = m
		return
	}
	r.Members = slices.Insert(r.Members, i, m)
}

// ProviderShare is what one shard may use of a provider's limits per
// minute (-1: no limit).
type ProviderShare struct {
	RPM, InputTPM, OutputTPM int64
}

// share is shard self's share of the provider's limits: its rebalanced
// share while the members are those it was set for, else the equal split
// (capped by a rebalanced share, which a change of members never raises).
func (r *providerRec) share(self uint32) ProviderShare {
	eq := r.equalShare(self)
	if r.Explicit == nil {
		return eq
	}
	x := *r.Explicit
	in := r.inMembers()
	if !slices.Contains(in, self) {
		return eq // not a member: none
	}
	if !slices.Equal(r.Basis, in) {
		x = ProviderShare{RPM: minShare(x.RPM, eq.RPM), InputTPM: minShare(x.InputTPM, eq.InputTPM), OutputTPM: minShare(x.OutputTPM, eq.OutputTPM)}
	}
	// A limit of 0 (none) has no share to keep.
	if r.RPM == 0 {
		x.RPM = -1
	}
	if r.InputTPM == 0 {
		x.InputTPM = -1
	}
	if r.OutputTPM == 0 {
		x.OutputTPM = -1
	}
	return x
}

// minShare is the tighter of two shares of one limit (-1: none).
func minShare(a, b int64) int64 {
	switch {
	case a < 0:
		return b
	case b < 0:
		return a
	}
	return min(a, b)
}

// equalShare is shard self's equal split of each limit over the members,
// the remainder one each to the first ones. A shard that is not a member
// has none.
func (r *providerRec) equalShare(self uint32) ProviderShare {
	parts, part := int64(0), int64(-1)
	for _, m := range r.Members {
		if !m.In {
			continue
		}
		if m.Shard == self {
			part = parts
		}
		parts++
	}
	one := func(limit int64) int64 {
		switch {
		case limit == 0:
			return -1
		case part < 0:
			return 0
		}
		s := limit / parts
		if part < limit%parts {
			s++
		}
		return s
	}
	return ProviderShare{RPM: one(r.RPM), InputTPM: one(r.InputTPM), OutputTPM: one(r.OutputTPM)}
}

// SetProviderOp creates a provider or changes its limits (its links and
// members stay); Delete removes it, its windows, and the links of this
// shard's queues to it.
type SetProviderOp struct {
	Provider Provider
	Delete   bool
}

// Code implements Op.
func (*SetProviderOp) Code() OpCode { return OpSetProvider }
func (o *SetProviderOp) appendBody(b []byte) []byte {
	e := enc{b: b}
	e.str(o.Provider.Namespace)
	e.str(o.Provider.Name)
	e.varint(o.Provider.RPM)
	e.varint(o.Provider.InputTPM)
	e.varint(o.Provider.OutputTPM)
	e.boolean(o.Delete)
	return e.b
}
func (o *SetProviderOp) decode(d *dec) {
	o.Provider.Namespace = d.str()
	o.Provider.Name = d.str()
	o.Provider.RPM = d.varint()
	o.Provider.InputTPM = d.varint()
	o.Provider.OutputTPM = d.varint()
	o.Delete = d.boolean()
}

// LinkProviderOp links a queue to a provider of its namespace (Provider
// empty: unlinks it). The result's Members carry this shard's membership
// of the providers the link changed, for the gateway to propose to every
// shard (ProviderMemberOp).
type LinkProviderOp struct {
	Queue    string
	Provider string // the provider's name
}

// Code implements Op.
func (*LinkProviderOp) Code() OpCode { return OpLinkProvider }
func (o *LinkProviderOp) appendBody(b []byte) []byte {
	e := enc{b: b}
	e.str(o.Queue)
	e.str(o.Provider)
	return e.b
}
func (o *LinkProviderOp) decode(d *dec) {
	o.Queue = d.str()
	o.Provider = d.str()
}

// ProviderMemberOp tells a shard another shard's membership of a
// provider's pool; an older generation than the one known changes
// nothing.
type ProviderMemberOp struct {
	Namespace string
	Member    ProviderMember // Name is the provider's
}

// Code implements Op.
func (*ProviderMemberOp) Code() OpCode { return OpProviderMember }
func (o *ProviderMemberOp) appendBody(b []byte) []byte {
	e := enc{b: b}
	e.str(o.Namespace)
	e.str(o.Member.Name)
	e.uvarint(uint64(o.Member.Shard))
	e.uvarint(o.Member.Gen)
	e.boolean(o.Member.In)
	return e.b
}
func (o *ProviderMemberOp) decode(d *dec) {
	o.Namespace = d.str()
	o.Member.Name = d.str()
	o.Member.Shard = uint32(d.uvarint())
	o.Member.Gen = d.uvarint()
	o.Member.In = d.boolean()
}

func providerKey(id string) []byte { return append([]byte(pfxProvider), id...) }

func providerWindowPrefix(pfx, id string) []byte {
	k := make([]byte, 0, len(pfx)+len(id)+1+16)
	k = append(k, pfx...)
	k = append(k, id...)
	return append(k, 0)
}

func providerWindowKey(pfx, id string, at int64, seq uint64) []byte {
	k := providerWindowPrefix(pfx, id)
	k = binary.BigEndian.AppendUint64(k, uint64(at))
	return binary.BigEndian.AppendUint64(k, seq)
}

// provider reads a provider's record through the batch (nil: none).
func (a *applier) provider(id string) *providerRec {
	v, ok := a.get(providerKey(id))
	if !ok {
		return nil
	}
	r := &providerRec{}
	d := dec{b: v}
	r.decode(&d)
	if d.err != nil {
		a.fail(fmt.Errorf("corrupt provider %q: %w", id, d.err))
		return nil
	}
	return r
}

func (a *applier) putProvider(r *providerRec) {
	a.set(providerKey(r.ID()), r.appendTo(nil))
}

func (a *applier) setProvider(o *SetProviderOp) Result {
	p := &o.Provider
	id := p.ID()
	if o.Delete {
		if err := CheckProviderName(p.Name); err != nil {
			return Result{Status: StatusInvalid, Message: err.Error()}
		}
		if a.provider(id) == nil {
			return Result{Status: StatusNotFound, Message: "no provider " + p.Name}
		}
		a.del(providerKey(id))
		for _, pfx := range []string{pfxProvReq, pfxProvTok} {
			wp := providerWindowPrefix(pfx, id)
			if err := a.b.DeleteRange(wp, prefixEnd(wp), nil); err != nil {
				a.fail(err)
			}
		}
		delete(a.s.provReqs, id)
		delete(a.s.provToks, id)
		for _, q := range a.linkedQueues(id) {
			c := a.config(q)
			c.Provider = ""
			a.set(queueCfgKey(q), c.appendTo(nil))
			a.dirty[q], a.ready[q] = struct{}{}, struct{}{}
		}
		return Result{}
	}
	if err := p.Check(); err != nil {
		return Result{Status: StatusInvalid, Message: err.Error()}
	}
	r := a.provider(id)
	if r == nil {
		r = &providerRec{}
	}
	if r.RPM != p.RPM || r.InputTPM != p.InputTPM || r.OutputTPM != p.OutputTPM {
		r.Explicit = nil // set for the old limits: the equal split until the next rebalance
	}
	r.Provider = *p
	a.putProvider(r)
	a.wakeLinked(id) // a raised limit may unblock waiting fetches
	return Result{}
}

// linkedQueues lists this shard's queues linked to provider id, in name
// order (through the batch).
func (a *applier) linkedQueues(id string) []string {
	pfx := []byte(pfxQueueCfg)
	var out []string
	a.eachKey(pfx, func(k, _ []byte) bool {
		q := string(k[len(pfx):])
		if c := a.config(q); c.Provider != "" && queueProviderID(q, c.Provider) == id {
			out = append(out, q)
		}
		return true
	})
	return out
}

// wakeLinked marks the provider's queues here as touched and ready: their
// limits changed, so their signals must say so.
func (a *applier) wakeLinked(id string) {
	for _, q := range a.linkedQueues(id) {
		a.dirty[q], a.ready[q] = struct{}{}, struct{}{}
		a.stats(q)
	}
}

func (a *applier) linkProvider(o *LinkProviderOp) Result {
	if err := router.ValidateStoredQueue(o.Queue); err != nil {
		return Result{Status: StatusInvalid, Message: err.Error()}
	}
	if o.Provider != "" {
		if err := CheckProviderName(o.Provider); err != nil {
			return Result{Status: StatusInvalid, Message: err.Error()}
		}
	}
	self := a.selfShard()
	var next *providerRec
	if o.Provider != "" {
		if next = a.provider(queueProviderID(o.Queue, o.Provider)); next == nil {
			return Result{Status: StatusNotFound, Message: "no provider " + o.Provider}
		}
	}
	c := a.config(o.Queue)
	res := Result{Queue: o.Queue}
	if c.Provider == o.Provider {
		// Linked already: report the membership again, so a retried
		// link propagates it.
		if next != nil {
			res.Members = append(res.Members, next.member(self))
		}
		return res
	}
	if c.Provider != "" {
		if old := a.provider(queueProviderID(o.Queue, c.Provider)); old != nil {
			if old.Linked > 0 {
				old.Linked--
			}
			if old.Linked == 0 {
				m := old.member(self)
				m.Gen++
				m.In = false
				old.putMember(m)
			}
			a.putProvider(old)
			res.Members = append(res.Members, old.member(self))
		}
	}
	if next != nil {
		next.Linked++
		if m := next.member(self); !m.In {
			m.Gen++
			m.In = true
			next.putMember(m)
		}
		a.putProvider(next)
		res.Members = append(res.Members, next.member(self))
	}
	c.Provider = o.Provider
	a.set(queueCfgKey(o.Queue), c.appendTo(nil))
	a.stats(o.Queue)
	a.dirty[o.Queue], a.ready[o.Queue] = struct{}{}, struct{}{}
	return res
}

func (a *applier) providerMember(o *ProviderMemberOp) Result {
	if err := CheckProviderName(o.Member.Name); err != nil {
		return Result{Status: StatusInvalid, Message: err.Error()}
	}
	id := providerID(o.Namespace, o.Member.Name)
	r := a.provider(id)
	if r == nil {
		return Result{Status: StatusNotFound, Message: "no provider " + o.Member.Name}
	}
	if o.Member.Shard == a.selfShard() {
		return Result{} // a shard's own membership follows its own links
	}
	if cur := r.member(o.Member.Shard); cur.Gen >= o.Member.Gen {
		return Result{}
	}
	r.putMember(o.Member)
	a.putProvider(r)
	a.wakeLinked(id) // the shares changed
	return Result{}
}

// provTok is one usage report's tokens in a provider's token window.
type provTok struct {
	at      int64
	in, out int64
}

// provRequests returns provider id's request times inside its window,
// dropping (and deleting) older ones.
func (a *applier) provRequests(id string) []int64 {
	times, ok := a.s.provReqs[id]
	if !ok {
		times = a.loadProvRequests(id)
	}
	cutoff := a.now - ProviderWindowNs
	drop := 0
	for drop < len(times) && times[drop] <= cutoff {
		drop++
	}
	if drop > 0 {
		times = times[drop:]
		if err := a.b.DeleteRange(providerWindowPrefix(pfxProvReq, id), providerWindowKey(pfxProvReq, id, cutoff+1, 0), nil); err != nil {
			a.fail(err)
		}
	}
	a.s.provReqs[id] = times
	return times
}

// provTokens returns provider id's token reports inside its window,
// dropping (and deleting) older ones.
func (a *applier) provTokens(id string) []provTok {
	toks, ok := a.s.provToks[id]
	if !ok {
		toks = a.loadProvTokens(id)
	}
	cutoff := a.now - ProviderWindowNs
	drop := 0
	for drop < len(toks) && toks[drop].at <= cutoff {
		drop++
	}
	if drop > 0 {
		toks = toks[drop:]
		if err := a.b.DeleteRange(providerWindowPrefix(pfxProvTok, id), providerWindowKey(pfxProvTok, id, cutoff+1, 0), nil); err != nil {
			a.fail(err)
		}
	}
	a.s.provToks[id] = toks
	return toks
}

func (a *applier) loadProvRequests(id string) []int64 {
	var times []int64
	a.eachProvKey(pfxProvReq, id, func(at int64, _ []byte) { times = append(times, at) })
	return times
}

func (a *applier) loadProvTokens(id string) []provTok {
	var toks []provTok
	a.eachProvKey(pfxProvTok, id, func(at int64, v []byte) {
		d := dec{b: v}
		t := provTok{at: at, in: d.varint(), out: d.varint()}
		if d.err != nil {
			a.fail(fmt.Errorf("corrupt provider token record of %q: %w", id, d.err))
			return
		}
		toks = append(toks, t)
	})
	return toks
}

func (a *applier) eachProvKey(pfx, id string, f func(at int64, v []byte)) {
	wp := providerWindowPrefix(pfx, id)
	a.eachKey(wp, func(k, v []byte) bool {
		if at, _, ok := splitTimeIndexKey(string(wp), k); ok {
			f(at, v)
		}
		return true
	})
}

// linkedProvider is the ID of the provider queue q is linked to and its
// record, if the queue is linked to one that exists.
func (a *applier) linkedProvider(q string) (string, *providerRec) {
	c := a.config(q)
	if c.Provider == "" {
		return "", nil
	}
	id := queueProviderID(q, c.Provider)
	r := a.provider(id)
	if r == nil {
		return "", nil
	}
	return id, r
}

// providerRoom is how many jobs the provider's queues on this shard may
// still hand out in the window (math.MaxInt: no request limit). A token
// window at its share leaves none.
func (a *applier) providerRoom(id string, r *providerRec) int {
	sh := r.share(a.selfShard())
	room := math.MaxInt
	if sh.RPM >= 0 {
		room = max(int(sh.RPM)-len(a.provRequests(id)), 0)
	}
	if sh.InputTPM >= 0 || sh.OutputTPM >= 0 {
		var in, out int64
		for _, t := range a.provTokens(id) {
			in += t.in
			out += t.out
		}
		if sh.InputTPM >= 0 && in >= sh.InputTPM || sh.OutputTPM >= 0 && out >= sh.OutputTPM {
			room = 0
		}
	}
	return room
}

// recordProviderFetch notes one job handed out from a queue linked to a
// provider with a request limit.
func (a *applier) recordProviderFetch(q string) {
	id, r := a.linkedProvider(q)
	if r == nil || r.RPM == 0 {
		return
	}
	a.rateSeq++
	a.set(providerWindowKey(pfxProvReq, id, a.now, a.index<<20|uint64(a.rateSeq)), nil)
	a.s.provReqs[id] = append(a.provRequests(id), a.now)
}

// addProviderTokens puts a usage change of a job of queue q in its
// provider's token window (when the provider limits tokens).
func (a *applier) addProviderTokens(q string, u *Usage) {
	in, out := max(u.InputTokens, 0), max(u.OutputTokens, 0)
	if in == 0 && out == 0 {
		return
	}
	id, r := a.linkedProvider(q)
	if r == nil || r.InputTPM == 0 && r.OutputTPM == 0 {
		return
	}
	a.rateSeq++
	e := enc{}
	e.varint(in)
	e.varint(out)
	a.set(providerWindowKey(pfxProvTok, id, a.now, a.index<<20|uint64(a.rateSeq)), e.b)
	a.s.provToks[id] = append(a.provTokens(id), provTok{at: a.now, in: in, out: out})
	a.dirty[q] = struct{}{} // its signal may now say it is blocked
	a.stats(q)
}

// providerBlockedUntil is when the provider's windows let queue q hand
// out jobs again (0: they do now; math.MaxInt64: not before a later
// signal, this shard having no share). Like blockedUntil it changes
// nothing.
func (a *applier) providerBlockedUntil(q string) int64 {
	id, r := a.linkedProvider(q)
	if r == nil {
		return 0
	}
	sh := r.share(a.selfShard())
	cutoff := a.now - ProviderWindowNs
	var until int64
	if sh.RPM >= 0 {
		times, ok := a.s.provReqs[id]
		if !ok {
			times = a.loadProvRequests(id)
		}
		first := 0
		for first < len(times) && times[first] <= cutoff {
			first++
		}
		if n := len(times) - first; int64(n) >= sh.RPM {
			if sh.RPM == 0 {
				return math.MaxInt64
			}
			until = max(until, times[len(times)-int(sh.RPM)]+ProviderWindowNs+1)
		}
	}
	if sh.InputTPM < 0 && sh.OutputTPM < 0 {
		return until
	}
	toks, ok := a.s.provToks[id]
	if !ok {
		toks = a.loadProvTokens(id)
	}
	first := 0
	for first < len(toks) && toks[first].at <= cutoff {
		first++
	}
	toks = toks[first:]
	for _, lim := range []struct {
		share int64
		get   func(t provTok) int64
	}{{sh.InputTPM, func(t provTok) int64 { return t.in }}, {sh.OutputTPM, func(t provTok) int64 { return t.out }}} {
		if lim.share < 0 {
			continue
		}
		var sum int64
		for _, t := range toks {
			sum += lim.get(t)
		}
		if sum < lim.share {
			continue
		}
		if lim.share == 0 {
			return math.MaxInt64
		}
		// The window frees once enough of its oldest reports have left
		// it for the sum to drop under the share.
		for _, t := range toks {
			sum -= lim.get(t)
			if sum < lim.share {
				until = max(until, t.at+ProviderWindowNs+1)
				break
			}
		}
	}
	return until
}

// ProvidersQuery reads every provider this shard holds, with its share
// and window use at Now (Unix ns) and this shard's queues linked to it;
// the answer is []ProviderInfo in ID order.
type ProvidersQuery struct{ Now int64 }

// ProviderInfo is a provider as one shard sees it.
type ProviderInfo struct {
	Provider
	Shard   uint32
	Members []ProviderMember // the shards sharing the pool, as this shard knows them
	Share   ProviderShare    // this shard's
	// ShareGen is the generation of this shard's rebalanced share (0:
	// never rebalanced).
	ShareGen uint64
	Queues   []string // this shard's linked queues (stored names)
	// Pending is how many jobs wait in this shard's linked queues (the
	// rebalancer's measure of demand).
	Pending int64
	// What this shard's window holds at Now.
	Requests, InputTokens, OutputTokens int64
}

func (s *StateMachine) providers(now int64) ([]ProviderInfo, error) {
	pfx := []byte(pfxProvider)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: pfx, UpperBound: prefixEnd(pfx)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	self := uint32(s.cfg.ShardID - 1)
	out := []ProviderInfo{}
	at := map[string]int{}
	for it.First(); it.Valid(); it.Next() {
		var r providerRec
		d := dec{b: it.Value()}
		r.decode(&d)
		if d.err != nil {
			return nil, fmt.Errorf("corrupt provider %q: %w", it.Key(), d.err)
		}
		info := ProviderInfo{Provider: r.Provider, Shard: self, Share: r.share(self), ShareGen: r.ShareGen}
		for _, m := range r.Members {
			m.Name = r.Name
			info.Members = append(info.Members, m)
		}
		id := r.ID()
		cutoff := now - ProviderWindowNs
		if err := s.eachWindowKey(pfxProvReq, id, cutoff, func([]byte) { info.Requests++ }); err != nil {
			return nil, err
		}
		if err := s.eachWindowKey(pfxProvTok, id, cutoff, func(v []byte) {
			d := dec{b: v}
			info.InputTokens += d.varint()
			info.OutputTokens += d.varint()
		}); err != nil {
			return nil, err
		}
		at[id] = len(out)
		out = append(out, info)
	}
	if err := it.Error(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return out, nil
	}
	cit, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(pfxQueueCfg), UpperBound: prefixEnd([]byte(pfxQueueCfg))})
	if err != nil {
		return nil, err
	}
	defer cit.Close()
	for cit.First(); cit.Valid(); cit.Next() {
		var c QueueConfig
		d := dec{b: cit.Value()}
		c.decode(&d)
		if d.err != nil || c.Provider == "" {
			continue
		}
		q := string(cit.Key()[len(pfxQueueCfg):])
		if i, ok := at[queueProviderID(q, c.Provider)]; ok {
			out[i].Queues = append(out[i].Queues, q)
			var st QueueStats
			if _, err := s.read(queueStatsKey(q), st.decode); err != nil {
				return nil, err
			}
			out[i].Pending += max(st.Counts[StatePending], 0)
		}
	}
	return out, cit.Error()
}

// eachWindowKey calls f with the value of each key of a provider window
// after cutoff.
func (s *StateMachine) eachWindowKey(pfx, id string, cutoff int64, f func(v []byte)) error {
	wp := providerWindowPrefix(pfx, id)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: providerWindowKey(pfx, id, cutoff+1, 0), UpperBound: prefixEnd(wp)})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		f(it.Value())
	}
	return it.Error()
}

// unlinkDropped takes a dropped queue out of its provider's count here.
// When it was the last linked one, this shard leaves the pool under a new
// generation that the other shards only learn from its next link: until
// then they keep counting it, which leaves them smaller shares, never
// larger ones.
func (a *applier) unlinkDropped(q string) {
	c := a.config(q)
	if c.Provider == "" {
		return
	}
	r := a.provider(queueProviderID(q, c.Provider))
	if r == nil {
		return
	}
	if r.Linked > 0 {
		r.Linked--
	}
	if r.Linked == 0 {
		m := r.member(a.selfShard())
		m.Gen++
		m.In = false
		r.putMember(m)
	}
	a.putProvider(r)
}

// Rebalanced shares (the gateway's rebalancer, gateway/providershare.go).
// A shard's share may be set explicitly by ProviderShareOps, each under a
// generation and for the pool's members as the rebalancer saw them (its
// basis). While this shard's members are the basis, the explicit share is
// the share; when they differ (a link changed the pool since), each limit
// is the smaller of the explicit share and the equal split, so a change
// of members never raises a rebalanced share. A share is lowered (each
// limit to the smaller of the current one and the op's) or, under the
// same generation the shard holds, raised: the rebalancer raises only by
// what the lowered shards' answers leave free (see ProviderShareOp).

// ProviderShareOp sets this shard's share of a provider's limits.
//
// Lower (Raise false): applies when Gen is newer than the shard's share
// generation; each limit becomes the smaller of the current share and
// Share's, never more. Raise: applies only when the shard's share
// generation is Gen (nothing changed it since the rebalancer lowered it);
// each limit becomes Share's (at most the limit). Both need this shard
// to be one of Members, which must be the provider's members as this
// shard knows them. The result's Share says the share after the op and
// what the shard's windows hold at its apply; a refused op (StatusConflict)
// changes nothing.
type ProviderShareOp struct {
	Namespace string
	Name      string
	Gen       uint64
	Members   []uint32 // sorted
	Share     ProviderShare
	Raise     bool
}

// ProviderShareState is a ProviderShareOp's answer: the share's
// generation and limits after it, and what the shard's windows held at
// its apply (requests handed out, input and output tokens reported).
type ProviderShareState struct {
	Gen   uint64
	Share ProviderShare
	Held  ProviderShare
}

// Code implements Op.
func (*ProviderShareOp) Code() OpCode { return OpProviderShare }
func (o *ProviderShareOp) appendBody(b []byte) []byte {
	e := enc{b: b}
	e.str(o.Namespace)
	e.str(o.Name)
	e.uvarint(o.Gen)
	e.uvarint(uint64(len(o.Members)))
	for _, m := range o.Members {
		e.uvarint(uint64(m))
	}
	e.varint(o.Share.RPM)
	e.varint(o.Share.InputTPM)
	e.varint(o.Share.OutputTPM)
	e.boolean(o.Raise)
	return e.b
}
func (o *ProviderShareOp) decode(d *dec) {
	o.Namespace = d.str()
	o.Name = d.str()
	o.Gen = d.uvarint()
	n := d.uvarint()
	if n > 1<<16 {
		d.fail()
		return
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		o.Members = append(o.Members, uint32(d.uvarint()))
	}
	o.Share.RPM = d.varint()
	o.Share.InputTPM = d.varint()
	o.Share.OutputTPM = d.varint()
	o.Raise = d.boolean()
}

// inMembers lists the shards in the pool, sorted.
func (r *providerRec) inMembers() []uint32 {
	var out []uint32
	for _, m := range r.Members {
		if m.In {
			out = append(out, m.Shard)
		}
	}
	return out
}

// providerHeld is what the provider's windows here hold at a.now.
func (a *applier) providerHeld(id string) ProviderShare {
	h := ProviderShare{RPM: int64(len(a.provRequests(id)))}
	for _, t := range a.provTokens(id) {
		h.InputTPM += t.in
		h.OutputTPM += t.out
	}
	return h
}

func (a *applier) providerShare(o *ProviderShareOp) Result {
	if err := CheckProviderName(o.Name); err != nil {
		return Result{Status: StatusInvalid, Message: err.Error()}
	}
	if o.Gen == 0 || !slices.IsSorted(o.Members) {
		return Result{Status: StatusInvalid, Message: "a provider share needs a generation and sorted members"}
	}
	id := providerID(o.Namespace, o.Name)
	r := a.provider(id)
	if r == nil {
		return Result{Status: StatusNotFound, Message: "no provider " + o.Name}
	}
	self := a.selfShard()
	state := func(st Status, msg string) Result {
		return Result{Status: st, Message: msg, Share: &ProviderShareState{Gen: r.ShareGen, Share: r.share(self), Held: a.providerHeld(id)}}
	}
	switch {
	case !slices.Equal(o.Members, r.inMembers()) || !slices.Contains(o.Members, self):
		return state(StatusConflict, "the provider's members here differ")
	case o.Raise && r.ShareGen != o.Gen:
		return state(StatusConflict, "the share changed since its generation")
	case !o.Raise && r.ShareGen >= o.Gen:
		return state(StatusConflict, "the share has a newer generation")
	}
	cur := r.share(self)
	next := ProviderShare{}
	for _, l := range []struct {
		limit     int64
		cur, want int64
		out       *int64
	}{{r.RPM, cur.RPM, o.Share.RPM, &next.RPM}, {r.InputTPM, cur.InputTPM, o.Share.InputTPM, &next.InputTPM}, {r.OutputTPM, cur.OutputTPM, o.Share.OutputTPM, &next.OutputTPM}} {
		v := min(max(l.want, 0), l.limit)
		if !o.Raise {
			v = min(v, l.cur)
		}
		if l.limit == 0 {
			v = -1
		}
		*l.out = v
	}
	r.ShareGen, r.Explicit, r.Basis = o.Gen, &next, slices.Clone(o.Members)
	a.putProvider(r)
	a.wakeLinked(id) // a raised share may unblock waiting fetches
	return state(StatusOK, "")
}
