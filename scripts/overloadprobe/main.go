// Command overloadprobe loads a server with large payloads and measures
// its reads meanwhile (scripts/overload.sh runs it): CONNS connections
// enqueue jobs of each phase's payload size for the phase's duration into
// the queue "overload" (never fetched; a 429 is retried after its
// Retry-After), while one reader searches every 50 ms — in turn `{}`, a
// payload_jq filter and queue+state, each limit 50 — and another GETs a
// recently accepted job every 20 ms. It stops when the last phase ends and
// prints the counts by status class, the payload bytes accepted, and the
// reads' p50/p99/max.
//
//	go run ./scripts/overloadprobe -conns 16 http://127.0.0.1:8080 65536:60s 1048576:40s
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

type phase struct {
	size int
	dur  time.Duration
}

func main() {
	conns := flag.Int("conns", 16, "connections enqueueing")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: overloadprobe [-conns N] URL SIZE:DURATION...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() < 2 {
		flag.Usage()
		os.Exit(2)
	}
	var phases []phase
	for _, a := range flag.Args()[1:] {
		size, dur, ok := strings.Cut(a, ":")
		n, err1 := strconv.Atoi(size)
		d, err2 := time.ParseDuration(dur)
		if !ok || err1 != nil || err2 != nil || n < 32 || d <= 0 {
			fmt.Fprintf(os.Stderr, "overloadprobe: %q is not SIZE:DURATION (SIZE ≥ 32 bytes)\n", a)
			os.Exit(2)
		}
		phases = append(phases, phase{n, d})
	}
	if err := run(strings.TrimRight(flag.Arg(0), "/"), *conns, phases); err != nil {
		fmt.Fprintln(os.Stderr, "overloadprobe:", err)
		os.Exit(1)
	}
}

// classes counts answers by status class.
type classes struct {
	ok, throttled, server, client, transport atomic.Int64
}

func (c *classes) count(status int, err error) {
	switch {
	case err != nil:
		c.transport.Add(1)
	case status/100 == 2:
		c.ok.Add(1)
	case status == 429:
		c.throttled.Add(1)
	case status >= 500:
		c.server.Add(1)
	default:
		c.client.Add(1)
	}
}

func (c *classes) String() string {
	return fmt.Sprintf("2xx=%d 429=%d 5xx=%d 4xx=%d transport_errors=%d",
		c.ok.Load(), c.throttled.Load(), c.server.Load(), c.client.Load(), c.transport.Load())
}

// recent keeps the last accepted job IDs for the GET reader.
type recent struct {
	mu  sync.Mutex
	ids []string
	n   int
}

func (r *recent) add(id string) {
	r.mu.Lock()
	if len(r.ids) < 256 {
		r.ids = append(r.ids, id)
	} else {
		r.ids[r.n%len(r.ids)] = id
	}
	r.n++
	r.mu.Unlock()
}

func (r *recent) pick() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.ids) == 0 {
		return ""
	}
	return r.ids[rand.IntN(len(r.ids))]
}

func run(url string, conns int, phases []phase) error {
	wc := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxConnsPerHost: conns, MaxIdleConnsPerHost: conns}}
	rc := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	var (
		writes, reads classes
		accepted      atomic.Int64 // payload bytes of 2xx enqueues
		ids           recent
		seq           atomic.Int64
	)
	ctx, stop := context.WithCancel(context.Background())
	var readers sync.WaitGroup
	searches := map[string]*latencies{}
	kinds := []struct{ name, body string }{
		{"{}", `{"limit":50}`},
		{"payload_jq", `{"payload_jq":".i == 7","limit":50}`},
		{"queue+state", `{"queue":"overload","state":["pending"],"limit":50}`},
	}
	for _, k := range kinds {
		searches[k.name] = &latencies{}
	}
	var partial atomic.Int64
	gets := &latencies{}
	readers.Add(2)
	go func() {
		defer readers.Done()
		for i := 0; ctx.Err() == nil; i++ {
			k := kinds[i%len(kinds)]
			t0 := time.Now()
			a, err := call(rc, "POST", url+"/api/v1/jobs/search", []byte(k.body))
			searches[k.name].add(time.Since(t0))
			reads.count(a.status, err)
			if a.status == 200 && bytes.Contains(a.body, []byte(`"partial":true`)) {
				partial.Add(1)
			}
			if a.status >= 500 || a.status/100 == 4 {
				fmt.Fprintf(os.Stderr, "search %s: %d %s (after %v)\n", k.name, a.status, bytes.TrimSpace(a.body), time.Since(t0).Round(time.Millisecond))
			}
			pause(ctx, 50*time.Millisecond)
		}
	}()
	go func() {
		defer readers.Done()
		for ctx.Err() == nil {
			if id := ids.pick(); id != "" {
				t0 := time.Now()
				a, err := call(rc, "GET", url+"/api/v1/jobs/"+id, nil)
				gets.add(time.Since(t0))
				reads.count(a.status, err)
				if a.status >= 500 {
					fmt.Fprintf(os.Stderr, "GET job: %d %s (after %v)\n", a.status, bytes.TrimSpace(a.body), time.Since(t0).Round(time.Millisecond))
				}
			}
			pause(ctx, 20*time.Millisecond)
		}
	}()

	for _, ph := range phases {
		end := time.Now().Add(ph.dur)
		var wg sync.WaitGroup
		for range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(end) {
					body := payload(seq.Add(1), ph.size)
					a, err := call(wc, "POST", url+"/api/v1/enqueue", body)
					writes.count(a.status, err)
					switch {
					case err != nil:
						time.Sleep(min(time.Until(end), 100*time.Millisecond))
					case a.status/100 == 2:
						accepted.Add(int64(ph.size))
						var e struct {
							JobID string `json:"job_id"`
						}
						if json.Unmarshal(a.body, &e) == nil && e.JobID != "" {
							ids.add(e.JobID)
						}
					case a.status == 429 || a.status == 503 || a.status == 507:
						time.Sleep(min(time.Until(end), a.retry))
					}
				}
			}()
		}
		wg.Wait()
		fmt.Printf("phase %d B × %v: done\n", ph.size, ph.dur)
	}
	stop()
	readers.Wait()
	fmt.Printf("enqueue      %s\n", &writes)
	fmt.Printf("reads        %s partial=%d\n", &reads, partial.Load())
	fmt.Printf("accepted_payload_bytes %d\n", accepted.Load())
	all := &latencies{}
	for _, k := range kinds {
		searches[k.name].report("search " + k.name)
		all.d = append(all.d, searches[k.name].d...)
	}
	all.report("search (all)")
	gets.report("GET /jobs/{id}")
	return nil
}

// payload is the body of an enqueue whose payload is n bytes of JSON:
// {"i":seq,"pad":"xxx…"}.
func payload(seq int64, n int) []byte {
	head := `{"queue":"overload","payload":{"i":` + strconv.FormatInt(seq, 10) + `,"pad":"`
	pad := max(0, n-len(`{"i":`+strconv.FormatInt(seq, 10)+`,"pad":""}`))
	b := make([]byte, 0, len(head)+pad+4)
	b = append(b, head...)
	b = append(b, bytes.Repeat([]byte{'x'}, pad)...)
	return append(b, `"}}`...)
}

// answer is a server's answer.
type answer struct {
	status int
	body   []byte
	retry  time.Duration // Retry-After (1 s when absent)
}

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// call sends one request and returns the answer.
func call(c *http.Client, method, url string, body []byte) (answer, error) {
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	a := answer{status: resp.StatusCode, body: b, retry: time.Second}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
		a.retry = time.Duration(s) * time.Second
	}
	return a, nil
}

type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

func (l *latencies) report(name string) {
	d := l.d
	if len(d) == 0 {
		fmt.Printf("%-20s n=0\n", name)
		return
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	at := func(p float64) time.Duration { return d[int(float64(len(d)-1)*p)].Round(100 * time.Microsecond) }
	fmt.Printf("%-20s n=%d p50=%v p99=%v max=%v\n", name, len(d), at(.5), at(.99), at(1))
}
