package mirror

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/corvohq/corvo/statemachine"
)

// BenchmarkMirrorWrite is the mirror's write path for freshly enqueued
// jobs (one upsert each), in flushes of 5,000 jobs: ns/op is per job.
func BenchmarkMirrorWrite(b *testing.B) {
	m, err := Open(Config{Path: b.TempDir() + "/mirror.db", Shards: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	const flush = 5000
	views := make([]statemachine.JobView, flush)
	b.ResetTimer()
	for done := 0; done < b.N; done += flush {
		p := &pending{changes: make(map[string]change, flush), index: []uint64{uint64(done + 1)}}
		for i := 0; i < flush && done+i < b.N; i++ {
			n := done + i
			views[i] = statemachine.JobView{
				Job: statemachine.Job{ID: fmt.Sprintf("job_0_%026d", n), Queue: fmt.Sprintf("bench.q%d", n%4),
					Payload:    []byte(`{"t":1700000000,"r":12345,"i":42,"pad":""}`),
					JobOptions: statemachine.JobOptions{Priority: statemachine.PriorityNormal}, CreatedAt: base + int64(n)},
				State: statemachine.JobState{State: statemachine.StatePending},
			}
			p.changes[views[i].Job.ID] = change{idx: uint64(done + 1), c: &statemachine.JobChange{ID: views[i].Job.ID, Job: &views[i].Job, State: views[i].State}}
		}
		if err := m.write(p); err != nil {
			b.Fatal(err)
		}
	}
}

// mirrorOfLargeJobs is a one-shard mirror holding 5,000 pending jobs of
// queue q, each with payload (kept as its first PayloadMaxDefault bytes
// when longer).
func mirrorOfLargeJobs(b *testing.B, payload []byte) *Mirror {
	m, err := Open(Config{Path: b.TempDir() + "/mirror.db", Shards: 1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(m.Close)
	const jobs = 5000
	views := make([]statemachine.JobView, jobs)
	p := &pending{changes: make(map[string]change, jobs), index: []uint64{1}}
	for i := range views {
		views[i] = statemachine.JobView{
			Job: statemachine.Job{ID: fmt.Sprintf("job_0_%026d", i), Queue: "q", Payload: payload,
				JobOptions: statemachine.JobOptions{Priority: statemachine.PriorityNormal}, CreatedAt: base + int64(i)},
			State: statemachine.JobState{State: statemachine.StatePending},
		}
		p.changes[views[i].Job.ID] = change{idx: 1, c: &statemachine.JobChange{ID: views[i].Job.ID, Job: &views[i].Job, State: views[i].State}}
	}
	if err := m.write(p); err != nil {
		b.Fatal(err)
	}
	return m
}

// BenchmarkMirrorSearchPage is a search page of 50 jobs (newest first,
// the created_at index) among 5,000 whose 64 KiB payloads the mirror keeps
// as their first 16 KiB: ns/op is per page.
func BenchmarkMirrorSearchPage(b *testing.B) {
	m := mirrorOfLargeJobs(b, []byte(`{"pad":"`+strings.Repeat("x", 64<<10)+`"}`))
	for b.Loop() {
		page, err := m.Search(context.Background(), Filter{Limit: 50})
		if err != nil || len(page.Jobs) != 50 {
			b.Fatal(err, len(page.Jobs))
		}
	}
}

// BenchmarkMirrorSearchJQCut: a payload_jq search over jobs whose payloads
// the mirror keeps as a prefix (64 KiB each, over PayloadMaxDefault): none
// can match, and the page and its count read every job.
func BenchmarkMirrorSearchJQCut(b *testing.B) {
	m := mirrorOfLargeJobs(b, []byte(`{"i":1,"pad":"`+strings.Repeat("x", 64<<10)+`"}`))
	for b.Loop() {
		page, err := m.Search(context.Background(), Filter{PayloadJQ: ".i == 7", Limit: 50})
		if err != nil || len(page.Jobs) != 0 {
			b.Fatal(err, len(page.Jobs))
		}
	}
}
