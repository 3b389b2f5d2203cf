package statemachine

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Usage and cost of LLM work (issue 20). A worker reports what its calls
// used on a heartbeat, an ack or a fail; each report becomes a usage record
// of the job (ju|{id}\x00{n}), numbered like error records so a job retried
// from the start keeps its history:
//
//   - a heartbeat's usage is cumulative for the attempt: the attempt's
//     heartbeat record is replaced by each later report (the record keeps
//     its number);
//   - an ack's or a fail's usage is what the attempt used beyond its
//     heartbeats: its own record, added to theirs.
//
// The job's total is the sum of its records; JobState keeps the running
// cost (CostNanos) and the number of records (UsageKeys), so a budget can
// test a job's spend without a scan. Every change also moves the queue's
// totals of the UTC day it is reported on (ud|{day}{queue}), which a
// per-queue daily budget reads in O(1); a per-tag total can be kept at
// the same point (applier.addUsage) for the tags a budget names.
//
// Costs are integers of 1e-9 USD, so that sums are exact and every replica
// adds the same bits; the gateway converts cost_usd when it decodes.

// Usage is one report: tokens, the model and provider, cost and latency.
type Usage struct {
	InputTokens         int64
	OutputTokens        int64
	CacheCreationTokens int64
	CacheReadTokens     int64
	Model               string
	Provider            string
	CostNanos           int64 // USD × 1e9
	LatencyMs           int64
}

// NanosPerUSD is the unit of Usage.CostNanos.
const NanosPerUSD = 1_000_000_000

// Bounds of a usage report (the gateway's and a peer's): tokens and
// latency are non-negative, cost at most MaxUsageCostNanos, names at most
// MaxUsageName bytes.
const (
	MaxUsageTokens    = 1 << 50
	MaxUsageCostNanos = 1_000_000 * NanosPerUSD
	MaxUsageName      = 256
)

// Check reports what is wrong with a report (nil: nothing).
func (u *Usage) Check() error {
	for _, f := range []struct {
		name string
		v    int64
	}{{"input_tokens", u.InputTokens}, {"output_tokens", u.OutputTokens}, {"cache_creation_tokens", u.CacheCreationTokens},
		{"cache_read_tokens", u.CacheReadTokens}, {"latency_ms", u.LatencyMs}} {
		if f.v < 0 || f.v > MaxUsageTokens {
			return fmt.Errorf("usage.%s must be 0–%d", f.name, int64(MaxUsageTokens))
		}
	}
	if u.CostNanos < 0 || u.CostNanos > MaxUsageCostNanos {
		return errors.New("usage.cost_usd must be 0–1000000")
	}
	if len(u.Model) > MaxUsageName || len(u.Provider) > MaxUsageName {
		return fmt.Errorf("usage.model and usage.provider must be at most %d bytes", MaxUsageName)
	}
	return nil
}

func (u *Usage) append(e *enc) {
	e.varint(u.InputTokens)
	e.varint(u.OutputTokens)
	e.varint(u.CacheCreationTokens)
	e.varint(u.CacheReadTokens)
	e.str(u.Model)
	e.str(u.Provider)
	e.varint(u.CostNanos)
	e.varint(u.LatencyMs)
}

func (u *Usage) decode(d *dec) {
	u.InputTokens = d.varint()
	u.OutputTokens = d.varint()
	u.CacheCreationTokens = d.varint()
	u.CacheReadTokens = d.varint()
	u.Model = d.str()
	u.Provider = d.str()
	u.CostNanos = d.varint()
	u.LatencyMs = d.varint()
}

// appendOptUsage writes an op's optional trailing usage: nothing when nil
// (wire.go, rule 6: an op without usage keeps its earlier bytes).
func appendOptUsage(e *enc, u *Usage) {
	if u != nil {
		e.boolean(true)
		u.append(e)
	}
}

// decodeOptUsage reads what appendOptUsage wrote, if anything remains.
func decodeOptUsage(d *dec) *Usage {
	if !d.more() || !d.boolean() {
		return nil
	}
	u := &Usage{}
	u.decode(d)
	return u
}

// add adds o's counts to u (names are u's).
func (u *Usage) add(o *Usage, sign int64) {
	u.InputTokens += sign * o.InputTokens
	u.OutputTokens += sign * o.OutputTokens
	u.CacheCreationTokens += sign * o.CacheCreationTokens
	u.CacheReadTokens += sign * o.CacheReadTokens
	u.CostNanos += sign * o.CostNanos
}

// UsagePhase says which call a usage record came with.
type UsagePhase uint8

// Usage phases. Values are stored; never renumber.
const (
	PhaseHeartbeat UsagePhase = 1
	PhaseAck       UsagePhase = 2
	PhaseFail      UsagePhase = 3
)

func (p UsagePhase) String() string {
	switch p {
	case PhaseHeartbeat:
		return "heartbeat"
	case PhaseAck:
		return "ack"
	case PhaseFail:
		return "fail"
	}
	return fmt.Sprintf("phase(%d)", uint8(p))
}

// UsageRecord is one usage record of a job: the attempt (and when it
// started, which tells two attempts of one number apart after a retry),
// the phase, the report and when it was made, and the queue the job was in.
type UsageRecord struct {
	N         uint32 // the record's number, from 1
	Attempt   uint32
	StartedAt int64
	Phase     UsagePhase
	At        int64
	Queue     string
	Usage
}

const usageRecordVersion = 1

func (r *UsageRecord) appendTo(b []byte) []byte {
	e := enc{b: b}
	e.u8(usageRecordVersion)
	e.uvarint(uint64(r.N))
	e.uvarint(uint64(r.Attempt))
	e.varint(r.StartedAt)
	e.u8(uint8(r.Phase))
	e.varint(r.At)
	e.str(r.Queue)
	r.Usage.append(&e)
	return e.b
}

func (r *UsageRecord) decode(d *dec) {
	if v := d.u8(); v != usageRecordVersion {
		d.fail()
		return
	}
	r.N = uint32(d.uvarint())
	r.Attempt = uint32(d.uvarint())
	r.StartedAt = d.varint()
	r.Phase = UsagePhase(d.u8())
	r.At = d.varint()
	r.Queue = d.str()
	r.Usage.decode(d)
}

// UsageTotals adds usage up: a job's, or a queue's for a day.
type UsageTotals struct {
	InputTokens         int64
	OutputTokens        int64
	CacheCreationTokens int64
	CacheReadTokens     int64
	CostNanos           int64
	Reports             int64 // usage reports counted (a replaced heartbeat report counts once)
}

func (t *UsageTotals) add(u *Usage, sign int64) {
	t.InputTokens += sign * u.InputTokens
	t.OutputTokens += sign * u.OutputTokens
	t.CacheCreationTokens += sign * u.CacheCreationTokens
	t.CacheReadTokens += sign * u.CacheReadTokens
	t.CostNanos += sign * u.CostNanos
}

func (t *UsageTotals) appendTo(b []byte) []byte {
	e := enc{b: b}
	e.varint(t.InputTokens)
	e.varint(t.OutputTokens)
	e.varint(t.CacheCreationTokens)
	e.varint(t.CacheReadTokens)
	e.varint(t.CostNanos)
	e.varint(t.Reports)
	return e.b
}

func (t *UsageTotals) decode(d *dec) {
	t.InputTokens = d.varint()
	t.OutputTokens = d.varint()
	t.CacheCreationTokens = d.varint()
	t.CacheReadTokens = d.varint()
	t.CostNanos = d.varint()
	t.Reports = d.varint()
}

// Sum adds a job's usage records up.
func Sum(recs []UsageRecord) UsageTotals {
	var t UsageTotals
	for i := range recs {
		t.add(&recs[i].Usage, 1)
		t.Reports++
	}
	return t
}

// UsageDay is the UTC day (days since 1970-01-01) of a Unix ns time.
func UsageDay(ns int64) int64 {
	const day = 24 * 3600 * 1e9
	if ns < 0 {
		return (ns+1)/day - 1
	}
	return ns / day
}

// usageDayRetention is how many days of per-queue daily totals the sweep
// keeps (a monthly budget window and some).
const usageDayRetention = 62

func usageKey(id string, n uint32) []byte {
	k := make([]byte, 0, len(pfxUsage)+len(id)+5)
	k = append(k, pfxUsage...)
	k = append(k, id...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint32(k, n)
}

func usagePrefix(id string) []byte {
	k := append([]byte(pfxUsage), id...)
	return append(k, 0)
}

func usageDayKey(day int64, queue string) []byte {
	k := make([]byte, 0, len(pfxUsageDay)+4+len(queue))
	k = append(k, pfxUsageDay...)
	k = binary.BigEndian.AppendUint32(k, uint32(day))
	return append(k, queue...)
}

// addUsage records a report of the active job j (its state st): a new
// record, or, for a heartbeat, the attempt's heartbeat record replaced.
// It returns what changed (the report less the one it replaced), which
// the op's result carries for the gateway's counters.
func (a *applier) addUsage(j *Job, st *JobState, phase UsagePhase, u *Usage) UsageRecord {
	rec := UsageRecord{N: st.UsageKeys + 1, Attempt: st.Attempt, StartedAt: st.StartedAt, Phase: phase, At: a.now, Queue: j.Queue, Usage: *u}
	delta, replaced := rec, false
	if phase == PhaseHeartbeat && st.UsageKeys > 0 {
		// Only heartbeats write records while an attempt runs, so the
		// attempt's heartbeat record, if any, is the last one.
		if v, ok := a.get(usageKey(j.ID, st.UsageKeys)); ok {
			var prev UsageRecord
			d := dec{b: v}
			prev.decode(&d)
			if d.err != nil {
				a.fail(fmt.Errorf("corrupt usage record of %s: %w", j.ID, d.err))
				return delta
			}
			if prev.Phase == PhaseHeartbeat && prev.Attempt == st.Attempt && prev.StartedAt == st.StartedAt {
				rec.N, delta.N, replaced = prev.N, prev.N, true
				delta.Usage.add(&prev.Usage, -1)
			}
		}
	}
	if rec.N > st.UsageKeys {
		st.UsageKeys = rec.N
	}
	st.CostNanos += delta.CostNanos
	a.set(usageKey(j.ID, rec.N), rec.appendTo(nil))
	if a.newUsage != nil {
		a.newUsage[j.ID] = append(a.newUsage[j.ID], rec)
	}
	// The queue's day.
	dk := usageDayKey(UsageDay(a.now), j.Queue)
	var t UsageTotals
	if v, ok := a.get(dk); ok {
		d := dec{b: v}
		t.decode(&d)
		if d.err != nil {
			a.fail(fmt.Errorf("corrupt usage totals of %s: %w", j.Queue, d.err))
			return delta
		}
	}
	t.add(&delta.Usage, 1)
	if !replaced {
		t.Reports++
	}
	a.set(dk, t.appendTo(nil))
	a.addBudgetSpend(j, delta.CostNanos)
	a.addProviderTokens(j.Queue, &delta.Usage)
	return delta
}

// dropUsage deletes a job's usage records (the job is being deleted).
func (a *applier) dropUsage(id string, st *JobState) {
	if st.UsageKeys == 0 {
		return
	}
	pfx := usagePrefix(id)
	if err := a.b.DeleteRange(pfx, prefixEnd(pfx), nil); err != nil {
		a.fail(err)
	}
}

// pruneUsageDays deletes the daily totals older than the retention, when
// there are any (a seek, so a sweep with nothing to prune writes nothing).
func (a *applier) pruneUsageDays() {
	a.deleteRangeIfAny([]byte(pfxUsageDay), usageDayKey(UsageDay(a.now)-usageDayRetention, ""))
}

// deleteRangeIfAny deletes [lower, upper) when a key lies in it: a daily
// prune then writes no range tombstone on the days it has nothing to drop.
func (a *applier) deleteRangeIfAny(lower, upper []byte) {
	it, err := a.b.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		a.fail(err)
		return
	}
	found := it.First()
	if err := it.Close(); err != nil {
		a.fail(err)
		return
	}
	if found {
		if err := a.b.DeleteRange(lower, upper, nil); err != nil {
			a.fail(err)
		}
	}
}

// UsageDayQuery reads every queue's usage totals of one UTC day (UsageDay);
// the answer is []QueueUsage sorted by queue.
type UsageDayQuery struct{ Day int64 }

// QueueUsage is a queue's usage totals for a day.
type QueueUsage struct {
	Queue string
	UsageTotals
}

func (s *StateMachine) usageDay(day int64) ([]QueueUsage, error) {
	pfx := usageDayKey(day, "")
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: pfx, UpperBound: prefixEnd(pfx)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	out := []QueueUsage{}
	for it.First(); it.Valid(); it.Next() {
		q := QueueUsage{Queue: string(it.Key()[len(pfx):])}
		d := dec{b: it.Value()}
		q.UsageTotals.decode(&d)
		if d.err != nil {
			return nil, fmt.Errorf("corrupt usage totals %q: %w", it.Key(), d.err)
		}
		out = append(out, q)
	}
	return out, it.Error()
}

// readUsage reads a job's usage records, oldest first.
func readUsage(r pebble.Reader, id string) ([]UsageRecord, error) {
	pfx := usagePrefix(id)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: pfx, UpperBound: prefixEnd(pfx)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []UsageRecord
	for it.First(); it.Valid(); it.Next() {
		var rec UsageRecord
		d := dec{b: it.Value()}
		rec.decode(&d)
		if d.err != nil {
			return nil, fmt.Errorf("corrupt usage record of %s: %w", id, d.err)
		}
		out = append(out, rec)
	}
	return out, it.Error()
}
