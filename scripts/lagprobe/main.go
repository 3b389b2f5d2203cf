// Command lagprobe measures how long a job takes, after its enqueue is
// acknowledged, to become searchable in the mirror, while something else
// loads the server: every 500 ms it enqueues one job to the queue
// "lagprobe" and polls POST /jobs/search by its ID every 10 ms.
//
//	go run ./scripts/lagprobe http://127.0.0.1:8080 30s
//
// It prints every probe's lag and the median and max: the "mirror lag
// under load" figure of BENCHMARKS.md.
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
		fmt.Fprintln(os.Stderr, "usage: lagprobe URL DURATION")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "lagprobe:", err)
		os.Exit(1)
	}
}

func post(url string, body any, out any) error {
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, data)
	}
	return json.Unmarshal(data, out)
}

func run(base, dur string) error {
	d, err := time.ParseDuration(dur)
	if err != nil {
		return err
	}
	var lags []time.Duration
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		var enq corvo.Enqueued
		if err := post(base+"/api/v1/enqueue", corvo.EnqueueRequest{Queue: "lagprobe", Payload: map[string]int{"probe": len(lags)}}, &enq); err != nil {
			return err
		}
		acked := time.Now()
		for {
			var page corvo.SearchPage
			if err := post(base+"/api/v1/jobs/search", corvo.SearchRequest{JobIDPrefix: enq.JobID}, &page); err != nil {
				return err
			}
			if page.Total == 1 {
				break
			}
			if time.Since(acked) > time.Minute {
				return fmt.Errorf("job %s not searchable after a minute", enq.JobID)
			}
			time.Sleep(10 * time.Millisecond)
		}
		lag := time.Since(acked)
		lags = append(lags, lag)
		fmt.Printf("%d ", lag.Milliseconds())
		time.Sleep(500 * time.Millisecond)
	}
	fmt.Println()
	if len(lags) == 0 {
		return nil
	}
	sorted := append([]time.Duration(nil), lags...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	fmt.Printf("probes %d  median %d ms  max %d ms\n", len(lags), sorted[len(sorted)/2].Milliseconds(), sorted[len(sorted)-1].Milliseconds())
	return nil
}
