package statemachine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/cockroachdb/pebble/v2"
)

// Scores (issue 20): free-form quality scores of a job's result, posted
// by people, evaluators or downstream consumers. Each score is a record
// of its job (sj|{id}\x00{n:4BE}), numbered by JobState.ScoreKeys;
// several per job. They go with their job (delete, purge) and reach the
// mirror's job_scores, where summaries are computed.

// Score limits.
const (
	MaxScoreDims    = 32
	MaxScoreName    = 64
	MaxScorer       = 128
	MaxScoreComment = 1024
	MaxScoreValue   = 1e12 // |value|
	// MaxScoresPerJob bounds the records of one job.
	MaxScoresPerJob = 1000
)

// ScoreDim is one dimension of a score.
type ScoreDim struct {
	Name  string
	Value float64
}

// Score is what a scorer posts.
type Score struct {
	Scorer  string
	Comment string
	Dims    []ScoreDim
}

// Check validates a score: a scorer, 1–MaxScoreDims dimensions with
// distinct names of 1–MaxScoreName bytes and finite values.
func (s *Score) Check() error {
	if s.Scorer == "" || len(s.Scorer) > MaxScorer {
		return fmt.Errorf("scorer must be 1–%d bytes", MaxScorer)
	}
	if len(s.Comment) > MaxScoreComment {
		return fmt.Errorf("comment must be at most %d bytes", MaxScoreComment)
	}
	if len(s.Dims) == 0 || len(s.Dims) > MaxScoreDims {
		return fmt.Errorf("dimensions: 1–%d names", MaxScoreDims)
	}
	for i, d := range s.Dims {
		if d.Name == "" || len(d.Name) > MaxScoreName {
			return fmt.Errorf("dimension names must be 1–%d bytes", MaxScoreName)
		}
		if math.IsNaN(d.Value) || math.IsInf(d.Value, 0) || math.Abs(d.Value) > MaxScoreValue {
			return fmt.Errorf("dimension %q: the value must be a finite number within ±%g", d.Name, float64(MaxScoreValue))
		}
		for _, o := range s.Dims[:i] {
			if o.Name == d.Name {
				return fmt.Errorf("dimension %q is named twice", d.Name)
			}
		}
	}
	return nil
}

func (s *Score) append(e *enc) {
	e.str(s.Scorer)
	e.str(s.Comment)
	e.uvarint(uint64(len(s.Dims)))
	for _, d := range s.Dims {
		e.str(d.Name)
		e.uvarint(math.Float64bits(d.Value))
	}
}

func (s *Score) decode(d *dec) {
	s.Scorer = d.str()
	s.Comment = d.str()
	n := d.uvarint()
	if n > MaxScoreDims {
		d.fail()
		return
	}
	s.Dims = make([]ScoreDim, n)
	for i := range s.Dims {
		s.Dims[i].Name = d.str()
		s.Dims[i].Value = math.Float64frombits(d.uvarint())
	}
}

// ScoreRecord is a stored score.
type ScoreRecord struct {
	N     uint32 // its number in the job, from 0
	Queue string // the job's queue when it was scored
	At    int64
	Score
}

func (r *ScoreRecord) appendTo(b []byte) []byte {
	e := enc{b: b}
	e.uvarint(uint64(r.N))
	e.str(r.Queue)
	e.varint(r.At)
	r.Score.append(&e)
	return e.b
}

func (r *ScoreRecord) decode(d *dec) {
	r.N = uint32(d.uvarint())
	r.Queue = d.str()
	r.At = d.varint()
	r.Score.decode(d)
}

// ScoreOp adds a score to a job.
type ScoreOp struct {
	JobID string
	Score
}

// Code implements Op.
func (*ScoreOp) Code() OpCode { return OpScore }
func (o *ScoreOp) appendBody(b []byte) []byte {
	e := enc{b: b}
	e.str(o.JobID)
	o.Score.append(&e)
	return e.b
}
func (o *ScoreOp) decode(d *dec) {
	o.JobID = d.str()
	o.Score.decode(d)
}

func scoreKey(id string, n uint32) []byte {
	k := scorePrefix(id)
	return binary.BigEndian.AppendUint32(k, n)
}

func scorePrefix(id string) []byte {
	k := make([]byte, 0, len(pfxScore)+len(id)+5)
	k = append(k, pfxScore...)
	k = append(k, id...)
	return append(k, 0)
}

func (a *applier) score(o *ScoreOp) Result {
	if err := o.Score.Check(); err != nil {
		return Result{Status: StatusInvalid, Message: err.Error()}
	}
	j, ok := a.loadJob(o.JobID)
	if !ok {
		return Result{Status: StatusNotFound, Message: "job not found"}
	}
	st := a.loadState(j.ID)
	if st.ScoreKeys >= MaxScoresPerJob {
		return Result{Status: StatusConflict, State: st.State, Queue: j.Queue, Message: fmt.Sprintf("the job has %d scores, the most it may", MaxScoresPerJob)}
	}
	rec := ScoreRecord{N: st.ScoreKeys, Queue: j.Queue, At: a.now, Score: o.Score}
	rec.Dims = append([]ScoreDim(nil), o.Dims...) // the op's decoded slices are the entry's
	a.set(scoreKey(j.ID, rec.N), rec.appendTo(nil))
	st.ScoreKeys++
	a.putState(j, &st)
	if a.newScores != nil {
		a.newScores[j.ID] = append(a.newScores[j.ID], rec)
	}
	return Result{State: st.State, Queue: j.Queue}
}

// dropScores deletes a job's score records.
func (a *applier) dropScores(id string, st *JobState) {
	if st.ScoreKeys == 0 {
		return
	}
	pfx := scorePrefix(id)
	if err := a.b.DeleteRange(pfx, prefixEnd(pfx), nil); err != nil {
		a.fail(err)
	}
}

var errCorruptScore = errors.New("corrupt score record")

// readScores reads a job's scores, oldest first.
func readScores(r pebble.Reader, id string) ([]ScoreRecord, error) {
	pfx := scorePrefix(id)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: pfx, UpperBound: prefixEnd(pfx)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []ScoreRecord
	for it.First(); it.Valid(); it.Next() {
		var rec ScoreRecord
		d := dec{b: it.Value()}
		rec.decode(&d)
		if d.err != nil {
			return nil, fmt.Errorf("%w of %s: %w", errCorruptScore, id, d.err)
		}
		out = append(out, rec)
	}
	return out, it.Error()
}
