// Command diskprobe loads a server with large enqueues for a fixed time
// and prints how many payload bytes it accepted: CONNS connections each
// enqueue one job at a time to the queue "disk" (never fetched), with a
// payload of SIZE bytes whose bulk is random base64, so neither Pebble's
// nor SQLite's storage can compress it away. 2xx answers are counted as
// accepted; 429 and 507 answers are counted apart (and the sender backs
// off 50 ms), anything else is an error.
//
//	go run ./scripts/diskprobe http://127.0.0.1:8080 16 65536 30s
//
// It is the load of scripts/disk-amplification.sh (BENCHMARKS.md, disk
// bytes per accepted payload byte).
package main

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	if len(os.Args) != 5 {
		fmt.Fprintln(os.Stderr, "usage: diskprobe URL CONNS SIZE DURATION")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2], os.Args[3], os.Args[4]); err != nil {
		fmt.Fprintln(os.Stderr, "diskprobe:", err)
		os.Exit(1)
	}
}

func run(url, connsArg, sizeArg, durArg string) error {
	conns, err := strconv.Atoi(connsArg)
	if err != nil || conns < 1 {
		return fmt.Errorf("CONNS must be a positive number, not %q", connsArg)
	}
	size, err := strconv.Atoi(sizeArg)
	if err != nil || size < 16 {
		return fmt.Errorf("SIZE must be at least 16, not %q", sizeArg)
	}
	dur, err := time.ParseDuration(durArg)
	if err != nil {
		return err
	}
	var accepted, refused, busy, failed, bytesOK atomic.Int64
	end := time.Now().Add(dur)
	var wg sync.WaitGroup
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{Timeout: 30 * time.Second}
			for time.Now().Before(end) {
				body, payload := request(size)
				resp, err := c.Post(url+"/api/v1/enqueue", "application/json", bytes.NewReader(body))
				if err != nil {
					failed.Add(1)
					time.Sleep(50 * time.Millisecond)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch {
				case resp.StatusCode/100 == 2:
					accepted.Add(1)
					bytesOK.Add(int64(payload))
				case resp.StatusCode == http.StatusInsufficientStorage:
					refused.Add(1)
					time.Sleep(50 * time.Millisecond)
				case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable:
					busy.Add(1)
					time.Sleep(50 * time.Millisecond)
				default:
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	fmt.Printf("accepted_jobs %d\naccepted_payload_bytes %d\nrefused_507 %d\nbusy_429_503 %d\nerrors %d\n",
		accepted.Load(), bytesOK.Load(), refused.Load(), busy.Load(), failed.Load())
	return nil
}

// request is an enqueue body whose payload is {"d":"<random base64>"} of
// about size bytes, and the payload's exact length.
func request(size int) ([]byte, int) {
	raw := make([]byte, (size-8)*3/4)
	_, _ = rand.Read(raw)
	payload := `{"d":"` + base64.StdEncoding.EncodeToString(raw) + `"}`
	return []byte(`{"queue":"disk","payload":` + payload + `}`), len(payload)
}
