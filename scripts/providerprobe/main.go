// Command providerprobe measures how closely a provider's requests per
// minute hold across shards: it creates a provider with rpm_limit RPM,
// links two queues that live on different shards, fills both with more
// jobs than the run can take, and runs WORKERS workers fetching both
// queues flat out (acking what they get) for DURATION. It prints the jobs
// delivered per queue, the jobs per minute over the run, the most jobs
// handed out in any 60 s window (by the server's claim times: a job's
// lease_expires_at less its lease_duration, the time the provider's
// window counts), and each against the limit.
//
// MODE "uneven" (default "even") fills only the first queue: the second
// stays linked and idle, so an equal split would hold the run to half
// the limit, and the shares rebalanced by demand (--provider-rebalance)
// should deliver nearly all of it.
//
//	go run ./scripts/providerprobe http://127.0.0.1:8080 600 60s 8 [even|uneven]
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/corvohq/corvo/router"
)

func main() {
	if len(os.Args) != 5 && len(os.Args) != 6 {
		fmt.Fprintln(os.Stderr, "usage: providerprobe URL RPM DURATION WORKERS [even|uneven]")
		os.Exit(2)
	}
	uneven := false
	if len(os.Args) == 6 {
		switch os.Args[5] {
		case "even":
		case "uneven":
			uneven = true
		default:
			fmt.Fprintln(os.Stderr, "providerprobe: MODE is even or uneven")
			os.Exit(2)
		}
	}
	rpm, err1 := strconv.Atoi(os.Args[2])
	d, err2 := time.ParseDuration(os.Args[3])
	workers, err3 := strconv.Atoi(os.Args[4])
	if err1 != nil || err2 != nil || err3 != nil || rpm < 1 || d <= 0 || workers < 1 {
		fmt.Fprintln(os.Stderr, "providerprobe: RPM and WORKERS are positive integers, DURATION a Go duration")
		os.Exit(2)
	}
	if err := run(os.Args[1], rpm, d, workers, uneven); err != nil {
		fmt.Fprintln(os.Stderr, "providerprobe:", err)
		os.Exit(1)
	}
}

var httpc = &http.Client{Timeout: 30 * time.Second}

// call sends a JSON request and decodes a 2xx answer into out (204: no
// content, out untouched); it returns the status.
func call(method, url string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode >= 300 {
		return resp.StatusCode, fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, b)
	}
	if out != nil && resp.StatusCode != 204 {
		return resp.StatusCode, json.Unmarshal(b, out)
	}
	return resp.StatusCode, nil
}

func run(url string, rpm int, d time.Duration, workers int, uneven bool) error {
	var health struct {
		Shards int `json:"shards"`
	}
	if _, err := call("GET", url+"/healthz", nil, &health); err != nil {
		return err
	}
	if health.Shards < 2 {
		return fmt.Errorf("the server has %d shard(s); two queues on different shards need 2", health.Shards)
	}
	rt := router.New(health.Shards)
	stamp := time.Now().Format("150405")
	var queues []string
	for i := 0; len(queues) < 2; i++ {
		q := fmt.Sprintf("provprobe.%s.%d", stamp, i)
		if len(queues) == 0 || rt.ShardForQueue(q) != rt.ShardForQueue(queues[0]) {
			queues = append(queues, q)
		}
	}
	name := "probe-" + stamp
	if _, err := call("PUT", url+"/api/v1/providers", map[string]any{"name": name, "rpm_limit": rpm}, nil); err != nil {
		return err
	}
	for _, q := range queues {
		if _, err := call("POST", url+"/api/v1/queues/"+q+"/provider", map[string]any{"provider": name}, nil); err != nil {
			return err
		}
	}
	// More jobs in each queue than the whole run may take (uneven: in the
	// first only).
	perQueue := rpm*int(d/time.Minute+2) + 100
	filled := queues
	if uneven {
		filled = queues[:1]
	}
	for _, q := range filled {
		for left := perQueue; left > 0; {
			n := min(left, 1000)
			jobs := make([]map[string]any, n)
			for i := range jobs {
				jobs[i] = map[string]any{"queue": q}
			}
			if _, err := call("POST", url+"/api/v1/enqueue/batch", map[string]any{"jobs": jobs}, nil); err != nil {
				return err
			}
			left -= n
		}
	}
	load := "both queues busy"
	if uneven {
		load = "only the first busy, the second idle"
	}
	fmt.Printf("provider %s: rpm_limit %d over %s (shard %d) and %s (shard %d), %s; %d workers for %s\n",
		name, rpm, queues[0], rt.ShardForQueue(queues[0]), queues[1], rt.ShardForQueue(queues[1]), load, workers, d)

	start := time.Now()
	end := start.Add(d)
	var mu sync.Mutex
	var at []time.Duration // when the server claimed each job, since start
	perQ := map[string]int{}
	var failed error
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				left := time.Until(end)
				if left <= 0 {
					return
				}
				var r struct {
					Jobs []struct {
						JobID         string    `json:"job_id"`
						Queue         string    `json:"queue"`
						LeaseDuration int64     `json:"lease_duration"`
						LeaseExpires  time.Time `json:"lease_expires_at"`
					} `json:"jobs"`
				}
				code, err := call("POST", url+"/api/v1/fetch", map[string]any{"queues": queues, "worker_id": fmt.Sprint("probe-", w),
					"count": 10, "timeout": min(left.Seconds(), 5)}, &r)
				recv := time.Since(start)
				if err != nil {
					mu.Lock()
					failed = err
					mu.Unlock()
					return
				}
				if code == 204 || recv >= d {
					continue // the run is over: a late answer's jobs do not count
				}
				acks := make([]map[string]any, len(r.Jobs))
				mu.Lock()
				for i, j := range r.Jobs {
					at = append(at, j.LeaseExpires.Add(-time.Duration(j.LeaseDuration)*time.Second).Sub(start))
					perQ[j.Queue]++
					acks[i] = map[string]any{"job_id": j.JobID}
				}
				mu.Unlock()
				if _, err := call("POST", url+"/api/v1/ack/batch", map[string]any{"acks": acks}, nil); err != nil {
					mu.Lock()
					failed = err
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if failed != nil {
		return failed
	}
	sort.Slice(at, func(i, j int) bool { return at[i] < at[j] })
	most := 0
	for i, j := 0, 0; j < len(at); j++ {
		for at[j]-at[i] >= time.Minute {
			i++
		}
		most = max(most, j-i+1)
	}
	perMin := float64(len(at)) / d.Minutes()
	fmt.Printf("delivered %d jobs (%s %d, %s %d) in %s\n", len(at), queues[0], perQ[queues[0]], queues[1], perQ[queues[1]], d)
	fmt.Printf("jobs/min over the run: %.1f (limit %d: %+.1f%%)\n", perMin, rpm, 100*(perMin-float64(rpm))/float64(rpm))
	fmt.Printf("most in any 60 s window: %d (limit %d: %+.1f%%)\n", most, rpm, 100*float64(most-rpm)/float64(rpm))
	var first, last time.Duration
	if len(at) > 0 {
		first, last = at[0], at[len(at)-1]
	}
	fmt.Printf("first job claimed at %s, last at %s (since the workers started)\n", first.Round(time.Millisecond), last.Round(time.Millisecond))
	return nil
}
