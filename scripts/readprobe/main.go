// Command readprobe measures read latency while something else loads a
// server: it enqueues 200 jobs to the queue "reads" (never fetched), then
// for the given duration GETs one of them every 5 ms and runs a
// queue+state search every tenth round, and prints p50/p99/max of both.
//
//	go run ./scripts/readprobe http://127.0.0.1:8080 60s
//
// It is the reads-never-wait measurement in BENCHMARKS.md.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"time"

	corvo "github.com/corvohq/corvo/sdk/go"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: readprobe URL DURATION")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "readprobe:", err)
		os.Exit(1)
	}
}

func run(url, duration string) error {
	dur, err := time.ParseDuration(duration)
	if err != nil {
		return err
	}
	c := &http.Client{Timeout: 10 * time.Second}
	ids := make([]string, 0, 200)
	for range 200 {
		var e corvo.Enqueued
		if err := call(c, "POST", url+"/api/v1/enqueue", `{"queue":"reads","payload":{"n":1}}`, &e); err != nil {
			return err
		}
		ids = append(ids, e.JobID)
	}
	var gets, searches []time.Duration
	errs := 0
	end := time.Now().Add(dur)
	for i := 0; time.Now().Before(end); i++ {
		t0 := time.Now()
		if call(c, "GET", url+"/api/v1/jobs/"+ids[i%len(ids)], "", nil) != nil {
			errs++
		}
		gets = append(gets, time.Since(t0))
		if i%10 == 0 {
			t0 = time.Now()
			if call(c, "POST", url+"/api/v1/jobs/search", `{"queue":"reads","state":["pending"],"limit":50}`, nil) != nil {
				errs++
			}
			searches = append(searches, time.Since(t0))
		}
		time.Sleep(5 * time.Millisecond)
	}
	report("GET /jobs/{id}", gets)
	report("POST /jobs/search", searches)
	fmt.Printf("errors %d\n", errs)
	return nil
}

// call sends one request and decodes a 2xx answer into out (when not nil).
func call(c *http.Client, method, url, body string, out any) error {
	req, err := http.NewRequest(method, url, bytes.NewBufferString(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, b)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

func report(name string, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	at := func(p float64) time.Duration { return d[int(float64(len(d)-1)*p)].Round(10 * time.Microsecond) }
	fmt.Printf("%-18s n=%d p50=%v p99=%v max=%v\n", name, len(d), at(.5), at(.99), at(1))
}
