package bench

import (
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"

	corvo "github.com/corvohq/corvo/sdk/go"
)

// payloadOverhead approximates the bytes of a payload besides the padding:
// {"t":1700000000000000000,"r":"0123456789abcdef","i":123456,"pad":""}
const payloadOverhead = len(`{"t":1700000000000000000,"r":"0123456789abcdef","i":123456,"pad":""}`)

// appendPayload appends the payload of job i sent at sentNs (unix ns).
func (r *runner) appendPayload(b []byte, i, sentNs int64) []byte {
	b = append(b, `{"t":`...)
	b = strconv.AppendInt(b, sentNs, 10)
	b = append(b, `,"r":`...)
	b = append(b, r.runIDJSON...)
	b = append(b, `,"i":`...)
	b = strconv.AppendInt(b, i, 10)
	if len(r.pad) == 0 {
		// A payload size at or below the header's: the smallest payload.
		return append(b, '}')
	}
	b = append(b, `,"pad":"`...)
	b = append(b, r.pad...)
	return append(b, `"}`...)
}

// appendJob appends {"queue":..,"payload":..} for job i.
func (r *runner) appendJob(b []byte, i, sentNs int64) []byte {
	b = append(b, `{"queue":`...)
	b = append(b, r.queuesJSON[i%int64(len(r.queuesJSON))]...)
	b = append(b, `,"payload":`...)
	b = r.appendPayload(b, i, sentNs)
	return append(b, '}')
}

// appendEnqueue appends the body of an enqueue request for jobs
// first..first+n-1: a single job when n == 1 and batching is off, otherwise
// a batch body.
func (r *runner) appendEnqueue(b []byte, first int64, n int, sentNs int64) []byte {
	if r.cfg.EnqueueBatch == 1 {
		return r.appendJob(b, first, sentNs)
	}
	b = append(b, `{"jobs":[`...)
	for i := range int64(n) {
		if i > 0 {
			b = append(b, ',')
		}
		b = r.appendJob(b, first+i, sentNs)
	}
	return append(b, "]}"...)
}

// fetchBodies builds the fetch request bodies of one worker, one per
// rotation of the queue list: the worker sends them in turn, so that every
// queue comes first once every len(queues) fetches, and workers start at
// different queues (worker w starts with queue w mod len(queues)).
func (r *runner) fetchBodies(worker int) [][]byte {
	queues := r.cfg.queueNames()
	if r.place != nil {
		_, own := r.workerQueues(worker)
		mine := make([]string, len(own))
		for i, k := range own {
			mine[i] = queues[k]
		}
		queues = mine
	}
	bodies := make([][]byte, len(queues))
	for k := range bodies {
		start := (worker + k) % len(queues)
		req := corvo.FetchBody{
			Queues:   append(append([]string(nil), queues[start:]...), queues[:start]...),
			WorkerID: "bench-" + r.runID + "-w" + strconv.Itoa(worker),
			Hostname: r.hostname,
			Timeout:  float64(r.cfg.FetchTimeout),
		}
		if r.cfg.FetchBatch > 1 {
			req.Count = r.cfg.FetchBatch
		}
		bodies[k], _ = json.Marshal(req) // cannot fail: only strings and numbers
	}
	return bodies
}

// ackFetchBodies turns a worker's fetch bodies into ack bodies carrying
// the same fetch with count 1 and no wait: {"worker_id": …, "fetch": {…}}.
func (r *runner) ackFetchBodies(fetches [][]byte) [][]byte {
	out := make([][]byte, len(fetches))
	for i, f := range fetches {
		var req corvo.FetchBody
		_ = json.Unmarshal(f, &req) // built by fetchBodies
		req.Count, req.Timeout = 1, 0
		out[i], _ = json.Marshal(struct {
			WorkerID string          `json:"worker_id"`
			Fetch    corvo.FetchBody `json:"fetch"`
		}{req.WorkerID, req})
	}
	return out
}

// appendAckBatch appends an /ack/batch body for jobs.
func appendAckBatch(b []byte, jobs []fetchedJob) []byte {
	b = append(b, `{"acks":[`...)
	for i, j := range jobs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"job_id":`...)
		b = appendJSONString(b, j.id)
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

// appendJSONString appends s as a JSON string literal.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
			i++
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			i++
		case c < utf8.RuneSelf:
			b = append(b, c)
			i++
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				b = append(b, `\ufffd`...)
			} else {
				b = append(b, s[i:i+size]...)
			}
			i += size
		}
	}
	return append(b, '"')
}

// benchPayload is the part of a payload written by appendPayload.
type benchPayload struct {
	T json.Number `json:"t"`
	R string      `json:"r"`
	I *int64      `json:"i"`
}

// fetchedJob is a job held by a worker until it is acked.
type fetchedJob struct {
	id     string
	sentNs int64 // producer send time, unix ns; 0 if unknown
	own    bool  // enqueued by this run
	index  int64 // the job's index in the run; -1 if unknown
	dup    bool  // delivered before (a redelivery)
}

// decodeFetch parses a fetch answer into jobs, classifying each as own or
// stale using the run ID embedded in the payload.
func (r *runner) decodeFetch(body []byte, dst []fetchedJob) ([]fetchedJob, error) {
	// One pass for both answers: a job, or {"jobs":[...]} (count > 1).
	var resp struct {
		corvo.FetchedJob
		corvo.FetchedJobs
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		return dst, fmt.Errorf("decode fetch response: %w", err)
	}
	if resp.Jobs == nil && resp.JobID != "" {
		return append(dst, r.toFetched(&resp.FetchedJob)), nil
	}
	for i := range resp.Jobs {
		dst = append(dst, r.toFetched(&resp.Jobs[i]))
	}
	return dst, nil
}

func (r *runner) toFetched(j *corvo.FetchedJob) fetchedJob {
	fj := fetchedJob{id: j.JobID, index: -1}
	var p benchPayload
	if json.Unmarshal(j.Payload, &p) != nil || p.R != r.runID {
		return fj
	}
	fj.own = true
	if p.I != nil {
		fj.index = *p.I
	}
	if n, err := p.T.Int64(); err == nil {
		fj.sentNs = n
	} else if f, err := p.T.Float64(); err == nil {
		fj.sentNs = int64(f) // the server re-encoded the number as a float
	}
	return fj
}
