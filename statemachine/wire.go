package statemachine

import (
	"encoding/binary"
	"errors"

	"github.com/corvohq/corvo/internal/intern"
)

// Records and how they grow.
//
// Everything the state machine stores or reads from a Raft log is written
// by enc and read by dec in a fixed field order: the ops of an entry (each
// op's body is length-prefixed by the entry), and the Pebble records —
// Job (j|), JobState (js|), JobError (je|), Schedule (sc|), Batch (b|),
// queue stats and settings, worker records, outbox records, dedup results. Entries sit in
// Raft logs and records in Pebble for as long as a cluster lives, and a
// replica replays old entries after every restart, so every build must
// read every byte an earlier build wrote, to the same values. One rule:
//
//  1. Append fields; never reorder, remove or retype one. A field no
//     longer used is still written (as its zero value) and read.
//  2. A decoder reads a field appended after a type's first release only
//     if bytes remain: `if d.more() { x.New = d.varint() }`. Absent means
//     zero, so the zero value must mean "as before the field existed".
//  3. Bytes after the last field a build knows are ignored: they are
//     fields of a later build.
//  4. A record is read from a bounded slice — a whole Pebble value, the
//     op body, or a length-prefixed field (enc.bytes) — never from the
//     middle of another record, or rule 2 would read the next record's
//     bytes. EnqueueOp is the one op with a record inside that is not
//     length-prefixed: its body is the job record then a flags byte
//     (IfAbsent, the budget verdict), so the job is the body less its
//     last byte, and an enqueue's new
//     fields go into Job (JobOptions), at the end of the job record.
//  5. Types written inline inside another (Chain, ChainTarget, Dep, Holder,
//     HeartbeatJob, the Results of a dedup record) cannot grow in place: a
//     field for them goes at the end of the record that holds them (a
//     list of values, one per element).
//  6. To keep records that do not use a new field byte-identical to what
//     the previous build wrote (replicas of different builds then still
//     agree), a trailing field may be left out while it and every field
//     after it are zero (JobState.ProgressAt).
//
// Leading version bytes (Job, JobState, JobError, Schedule, Batch, the
// entry) predate the rule and are kept as format marks: they never change
// again. JobError went from 1 to 2 when it grew; its decoder accepts both.
// Old records are frozen in testdata/wire (compat_test.go): add a fixture
// there when a format grows.

// errShort is returned when an encoded value ends early or is malformed.
var errShort = errors.New("statemachine: truncated or malformed encoding")

// enc appends Corvo's compact binary encoding: unsigned varints, zig-zag
// varints and length-prefixed byte strings, in a fixed field order per type.
type enc struct{ b []byte }

func (e *enc) u8(v uint8)       { e.b = append(e.b, v) }
func (e *enc) uvarint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *enc) varint(v int64)   { e.b = binary.AppendVarint(e.b, v) }
func (e *enc) bytes(v []byte) {
	e.b = binary.AppendUvarint(e.b, uint64(len(v)))
	e.b = append(e.b, v...)
}
func (e *enc) str(v string) {
	e.b = binary.AppendUvarint(e.b, uint64(len(v)))
	e.b = append(e.b, v...)
}
func (e *enc) boolean(v bool) {
	if v {
		e.b = append(e.b, 1)
	} else {
		e.b = append(e.b, 0)
	}
}

// dec reads what enc wrote. The first error sticks; callers check err once
// at the end. Byte slices returned alias the input unless copied.
type dec struct {
	b   []byte
	err error
	// names, when set, interns the names an entry repeats (queues,
	// workers, hosts: name).
	names *intern.Table
}

// name reads a string that names a queue, a worker or a host: from the
// interner when the decoder has one (an entry's ops name the same few
// queues and workers over and over; each was its own string).
func (d *dec) name() string {
	if d.names == nil {
		return d.str()
	}
	b := d.bytes()
	if len(b) == 0 {
		return ""
	}
	return d.names.Get(b)
}

func (d *dec) fail() {
	if d.err == nil {
		d.err = errShort
	}
	d.b = nil
}

// more reports whether a record has bytes left: whether a field appended
// after the record's first release was written (rule 2 above).
func (d *dec) more() bool { return d.err == nil && len(d.b) > 0 }

func (d *dec) u8() uint8 {
	if len(d.b) < 1 {
		d.fail()
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *dec) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if uint64(len(d.b)) < n {
		d.fail()
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	if n == 0 {
		return nil
	}
	return v
}

func (d *dec) str() string { return string(d.bytes()) }

func (d *dec) boolean() bool {
	switch d.u8() {
	case 0:
		return false
	case 1:
		return true
	default:
		d.fail()
		return false
	}
}
