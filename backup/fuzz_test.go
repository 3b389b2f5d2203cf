package backup

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

const sample = `{"kind":"header","format":1,"created_at":1,"shards":2,"namespace":"all","keys":"metadata"}
{"kind":"queue","queue":{"name":"q","paused":true}}
{"kind":"job","job":{"id":"job_1_01J00000000000000000000000","queue":"q","priority":"normal","max_retries":3,"backoff":"exponential","base_delay_ms":1,"max_delay_ms":2,"lease_seconds":60,"created_at":5,"state":"dead","errors":[{"attempt":1,"error":"x","at":3}]}}
{"kind":"trailer","counts":{"job":1,"queue":1}}
`

// FuzzReader: whatever the bytes, the reader never panics, and what it
// accepts whole converts and plans without panicking.
func FuzzReader(f *testing.F) {
	f.Add([]byte(sample))
	f.Add([]byte(sample[:len(sample)/2]))
	f.Add([]byte(sampleAI))
	f.Add([]byte(sampleProviders))
	f.Add([]byte(`{"kind":"header","format":1,"shards":1,"namespace":"acme","keys":"full"}` + "\n" + `{"kind":"trailer","counts":{}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := NewReader(bytes.NewReader(b))
		if err != nil {
			return
		}
		p := NewPlan(3, "")
		for {
			rec, err := r.Next()
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				return
			}
			if rec.Job != nil {
				_, _ = ToJob(rec.Job)
			}
			if rec.Schedule != nil {
				_, _ = ToSchedule(rec.Schedule)
			}
			if rec.Budget != nil {
				_, _ = ToBudget(rec.Budget)
			}
			if rec.Cache != nil {
				_, _ = ToCache(rec.Cache)
			}
			if rec.UsageDay != nil {
				_, _ = ToUsageDay(rec.UsageDay)
			}
			if rec.Provider != nil {
				_, _ = ToProvider(rec.Provider)
			}
			if p.See(&rec) == nil {
				_ = p.Rewrite(&rec)
				_ = p.Shard(&rec)
			}
		}
	})
}

func TestReaderRefusesTruncatedAndMismatched(t *testing.T) {
	read := func(s string) error {
		r, err := NewReader(bytes.NewReader([]byte(s)))
		if err != nil {
			return err
		}
		for {
			if _, err := r.Next(); err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
		}
	}
	if err := read(sample); err != nil {
		t.Fatalf("the sample: %v", err)
	}
	lines := bytes.SplitAfter([]byte(sample), []byte("\n"))
	noTrailer := string(bytes.Join(lines[:3], nil))
	if err := read(noTrailer); !errors.Is(err, ErrTruncated) {
		t.Fatalf("no trailer: %v", err)
	}
	missing := string(lines[0]) + string(lines[1]) + string(lines[3])
	if err := read(missing); !errors.Is(err, ErrTruncated) {
		t.Fatalf("a record missing: %v", err)
	}
	if err := read(sample + "{}\n"); err == nil {
		t.Fatal("data after the trailer was accepted")
	}
	if err := read(`{"kind":"header","format":2,"shards":1,"namespace":"all","keys":"full"}`); err == nil {
		t.Fatal("an unknown format was accepted")
	}
}

func TestPlanRemapsAcrossShardCounts(t *testing.T) {
	p := NewPlan(3, "acme")
	job := Record{Kind: KindJob, Job: &Job{ID: "job_7_01J00000000000000000000000", Queue: "q", BatchID: "batch_7_01J00000000000000000000001",
		DependsOn: []Dep{{ID: "job_7_01J00000000000000000000002", Shard: 7}}}}
	dep := Record{Kind: KindJob, Job: &Job{ID: "job_7_01J00000000000000000000002", Queue: "other"}}
	for _, r := range []*Record{&job, &dep} {
		if err := p.See(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Rewrite(&job); err != nil {
		t.Fatal(err)
	}
	if job.Job.Queue != "acme/q" {
		t.Fatalf("queue %q", job.Job.Queue)
	}
	if want := p.JobID("job_7_01J00000000000000000000002"); job.Job.DependsOn[0].ID != want || want == "job_7_01J00000000000000000000002" {
		t.Fatalf("dependency %q, want %q", job.Job.DependsOn[0].ID, want)
	}
	if job.Job.BatchID != "batch_1_01J00000000000000000000001" || job.Job.BatchShard != 1 {
		t.Fatalf("batch %q on %d (7 %% 3 = 1)", job.Job.BatchID, job.Job.BatchShard)
	}
	if p.Remapped() != 2 {
		t.Fatalf("remapped %d", p.Remapped())
	}
}
