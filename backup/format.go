// Package backup is the file format of corvo backup and corvo restore, and
// the rewriting a restore applies to it. It is pure: the gateway streams
// records into a Writer and reads them back with a Reader; it does no I/O
// of its own.
//
// A backup is line-delimited JSON (gzip-compressed when its name ends in
// .gz; the CLI decides, the format does not change):
//
//	{"kind":"header","format":1,"created_at":…,"shards":8,"namespace":"all","keys":"metadata"}
//	{"kind":"namespace","namespace":{…}}   the meta group's records …
//	{"kind":"role","role":{…}}
//	{"kind":"key","key":{…}}               no "hash" unless keys=full
//	{"kind":"budget","budget":{…}}         every shard's spend summed by day
//	{"kind":"provider","provider":{…}}     a provider's limits (every shard holds it)
//	{"kind":"queue","queue":{…}}           … then each shard's, in shard order
//	                                       (with its provider link, when it has one)
//	{"kind":"schedule","schedule":{…}}
//	{"kind":"job","job":{…}}               with its usage records and scores
//	{"kind":"cache","cache":{…}}           result-cache entries
//	{"kind":"usage_day","usage_day":{…}}   a queue's usage totals of a day
//	{"kind":"batch","batch":{…}}           every shard's batches come last
//	{"kind":"trailer","counts":{"job":…,…}}
//
// The trailer counts each kind, so a truncated file (no trailer, or fewer
// records than it says) is refused before anything is restored.
//
// The format grows by adding: a new record kind, or a new optional field
// (absent means what it meant before the field existed). A file an older
// corvo wrote still reads, with the same format number; only a change that
// makes an older file mean something else bumps FormatVersion. (An older
// corvo refuses a newer file that holds a kind or field it does not know:
// the reader is strict.)
package backup

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/corvohq/corvo/auth"
)

// FormatVersion is the format a Writer writes and the only one a Reader
// reads.
const FormatVersion = 1

// Namespace "all" in a header: every namespace.
const AllNamespaces = "all"

// Keys modes: metadata leaves each key's hash out (a restored key exists
// but cannot authenticate until replaced); full keeps it (old keys keep
// working after a disaster-recovery restore).
const (
	KeysMetadata = "metadata"
	KeysFull     = "full"
)

// MaxLine bounds one line of a backup (a job with a payload, result and
// error history at the server's limits fits many times over).
const MaxLine = 64 << 20

// Record kinds.
const (
	KindHeader    = "header"
	KindNamespace = "namespace"
	KindRole      = "role"
	KindKey       = "key"
	KindQueue     = "queue"
	KindSchedule  = "schedule"
	KindJob       = "job"
	KindBatch     = "batch"
	KindBudget    = "budget"
	KindCache     = "cache"
	KindUsageDay  = "usage_day"
	KindProvider  = "provider"
	KindTrailer   = "trailer"
)

var recordKinds = []string{KindNamespace, KindRole, KindKey, KindQueue, KindSchedule, KindJob, KindBatch, KindBudget, KindCache, KindUsageDay, KindProvider}

// Header is a backup's first line.
type Header struct {
	Kind      string `json:"kind"`
	Format    int    `json:"format"`
	CreatedAt int64  `json:"created_at"` // Unix ns
	Shards    int    `json:"shards"`     // the source cluster's shard count
	Namespace string `json:"namespace"`  // one namespace, or "all"
	Keys      string `json:"keys"`       // metadata | full
}

// Trailer is a backup's last line.
type Trailer struct {
	Kind   string         `json:"kind"`
	Counts map[string]int `json:"counts"`
}

// Record is one line between the header and the trailer: Kind says which
// field is set.
type Record struct {
	Kind      string          `json:"kind"`
	Namespace *auth.Namespace `json:"namespace,omitempty"`
	Role      *auth.Role      `json:"role,omitempty"`
	Key       *Key            `json:"key,omitempty"`
	Queue     *Queue          `json:"queue,omitempty"`
	Schedule  *Schedule       `json:"schedule,omitempty"`
	Job       *Job            `json:"job,omitempty"`
	Batch     *Batch          `json:"batch,omitempty"`
	Budget    *Budget         `json:"budget,omitempty"`
	Cache     *Cache          `json:"cache,omitempty"`
	UsageDay  *UsageDay       `json:"usage_day,omitempty"`
	Provider  *Provider       `json:"provider,omitempty"`
}

// Key is an API key's stored record; Hash is set only in keys=full
// backups.
type Key struct {
	ID         string   `json:"id"`
	Hash       string   `json:"hash,omitempty"`
	Name       string   `json:"name"`
	Namespace  string   `json:"namespace"`
	Role       string   `json:"role"`
	Queues     []string `json:"queues,omitempty"`
	Enabled    bool     `json:"enabled"`
	CreatedAt  int64    `json:"created_at"`
	ExpiresAt  int64    `json:"expires_at,omitempty"`
	LastUsedAt int64    `json:"last_used_at,omitempty"`
	CreatedBy  string   `json:"created_by,omitempty"`
	RateRead   int      `json:"rate_read,omitempty"`
	RateWrite  int      `json:"rate_write,omitempty"`
}

// Queue is a queue's settings.
type Queue struct {
	Name           string `json:"name"` // stored name (namespace/queue)
	Paused         bool   `json:"paused,omitempty"`
	MaxConcurrency uint32 `json:"max_concurrency,omitempty"`
	RateLimit      uint32 `json:"rate_limit,omitempty"`
	RateWindowMs   int64  `json:"rate_window_ms,omitempty"`
	Provider       string `json:"provider,omitempty"` // the name of the provider of its namespace it is linked to
}

// Writer writes a backup: the header at once, then records, then Close's
// trailer.
type Writer struct {
	w      *bufio.Writer
	counts map[string]int
	err    error
}

// NewWriter writes h (its Kind and Format filled) to w.
func NewWriter(w io.Writer, h Header) *Writer {
	bw := &Writer{w: bufio.NewWriterSize(w, 64<<10), counts: map[string]int{}}
	h.Kind, h.Format = KindHeader, FormatVersion
	bw.line(h)
	return bw
}

func (w *Writer) line(v any) {
	if w.err != nil {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		w.err = err
		return
	}
	if _, err := w.w.Write(append(b, '\n')); err != nil {
		w.err = err
	}
}

// Write writes one record.
func (w *Writer) Write(r Record) error {
	if !slices.Contains(recordKinds, r.Kind) {
		return fmt.Errorf("backup: unknown record kind %q", r.Kind)
	}
	w.line(r)
	if w.err == nil {
		w.counts[r.Kind]++
	}
	return w.err
}

// Flush hands what is buffered to the underlying writer.
func (w *Writer) Flush() error {
	if w.err == nil {
		w.err = w.w.Flush()
	}
	return w.err
}

// Counts are the records written so far, by kind.
func (w *Writer) Counts() map[string]int { return maps.Clone(w.counts) }

// Close writes the trailer and flushes.
func (w *Writer) Close() error {
	w.line(Trailer{Kind: KindTrailer, Counts: w.counts})
	return w.Flush()
}

// Reader reads a backup a Writer wrote, checking it as it goes: the header
// first (a known format), records of known kinds with their field set,
// and at the end a trailer whose counts match what was read.
type Reader struct {
	sc     *bufio.Scanner
	Header Header
	counts map[string]int
	done   bool
	line   int
}

// ErrTruncated says the backup ends before its trailer, or holds fewer
// records than its trailer counts.
var ErrTruncated = errors.New("backup: the file is truncated (no trailer, or fewer records than it counts)")

// NewReader reads the header.
func NewReader(r io.Reader) (*Reader, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLine)
	br := &Reader{sc: sc, counts: map[string]int{}}
	b, err := br.next()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("backup: the file is empty")
		}
		return nil, err
	}
	if err := strict(b, &br.Header); err != nil || br.Header.Kind != KindHeader {
		return nil, errors.New("backup: the first line is not a backup header")
	}
	h := br.Header
	switch {
	case h.Format != FormatVersion:
		return nil, fmt.Errorf("backup: format %d is not %d (written by another version of corvo)", h.Format, FormatVersion)
	case h.Shards < 1:
		return nil, errors.New("backup: the header's shard count is not positive")
	case h.Namespace == "":
		return nil, errors.New("backup: the header names no namespace")
	case h.Keys != KeysMetadata && h.Keys != KeysFull:
		return nil, fmt.Errorf("backup: unknown keys mode %q", h.Keys)
	}
	return br, nil
}

func (r *Reader) next() ([]byte, error) {
	if !r.sc.Scan() {
		if err := r.sc.Err(); err != nil {
			return nil, fmt.Errorf("backup: line %d: %w", r.line+1, err)
		}
		return nil, io.EOF
	}
	r.line++
	return r.sc.Bytes(), nil
}

func strict(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return errors.New("trailing data")
	}
	return nil
}

// Next returns the next record, or io.EOF after a trailer that matches
// what was read (ErrTruncated when the file ends without one).
func (r *Reader) Next() (Record, error) {
	if r.done {
		return Record{}, io.EOF
	}
	b, err := r.next()
	if errors.Is(err, io.EOF) {
		return Record{}, ErrTruncated
	}
	if err != nil {
		return Record{}, err
	}
	var probe struct {
		Kind string `json:"kind"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return Record{}, fmt.Errorf("backup: line %d: %v", r.line, err)
	}
	if probe.Kind == KindTrailer {
		var t Trailer
		if err := strict(b, &t); err != nil {
			return Record{}, fmt.Errorf("backup: line %d (trailer): %v", r.line, err)
		}
		for _, k := range recordKinds {
			if t.Counts[k] > r.counts[k] {
				return Record{}, ErrTruncated
			}
		}
		if !maps.Equal(nonZero(t.Counts), r.counts) {
			return Record{}, fmt.Errorf("backup: the trailer counts %v, the file holds %v", t.Counts, r.counts)
		}
		if _, err := r.next(); !errors.Is(err, io.EOF) {
			return Record{}, fmt.Errorf("backup: line %d: data after the trailer", r.line)
		}
		r.done = true
		return Record{}, io.EOF
	}
	var rec Record
	if err := strict(b, &rec); err != nil {
		return Record{}, fmt.Errorf("backup: line %d: %v", r.line, err)
	}
	if err := rec.check(); err != nil {
		return Record{}, fmt.Errorf("backup: line %d: %v", r.line, err)
	}
	r.counts[rec.Kind]++
	return rec, nil
}

func nonZero(m map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range m {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}

// check says whether exactly the field Kind names is set.
func (r *Record) check() error {
	set := map[string]bool{
		KindNamespace: r.Namespace != nil, KindRole: r.Role != nil, KindKey: r.Key != nil, KindQueue: r.Queue != nil,
		KindSchedule: r.Schedule != nil, KindJob: r.Job != nil, KindBatch: r.Batch != nil,
		KindBudget: r.Budget != nil, KindCache: r.Cache != nil, KindUsageDay: r.UsageDay != nil, KindProvider: r.Provider != nil,
	}
	if _, known := set[r.Kind]; !known {
		return fmt.Errorf("unknown record kind %q", r.Kind)
	}
	for k, on := range set {
		if on != (k == r.Kind) {
			return fmt.Errorf("a %s record must hold exactly its %q object", r.Kind, r.Kind)
		}
	}
	return nil
}
