package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"

	"github.com/valyala/fasthttp"
)

// pathMetrics is the Prometheus exposition of a server.
const pathMetrics = "/api/v1/metrics"

// cpuMetric is the process CPU time (user+system, seconds) in it.
const cpuMetric = "process_cpu_seconds_total"

// serverCPU returns the sum of process_cpu_seconds_total over all servers of
// the run, and false when any of them does not expose it (an old server, a
// key without metrics:read, not Linux).
func (r *runner) serverCPU() (float64, bool) {
	var sum float64
	for _, c := range r.clients {
		v, err := c.cpuSeconds()
		if err != nil {
			r.progressf("server CPU not measured: %v\n", err)
			return 0, false
		}
		sum += v
	}
	return sum, true
}

// cpuSeconds reads process_cpu_seconds_total from the server's metrics.
func (c *httpClient) cpuSeconds() (float64, error) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(c.base + pathMetrics)
	req.Header.SetMethod(fasthttp.MethodGet)
	if c.auth != "" {
		req.Header.Set(fasthttp.HeaderAuthorization, c.auth)
	}
	if err := c.hc.DoTimeout(req, resp, requestTimeout); err != nil {
		return 0, fmt.Errorf("GET %s: %w", pathMetrics, err)
	}
	if s := resp.StatusCode(); s != fasthttp.StatusOK {
		return 0, fmt.Errorf("GET %s: %w", pathMetrics, newStatusError(s, resp.Body()))
	}
	return parseCPUSeconds(resp.Body())
}

// parseCPUSeconds finds the unlabelled process_cpu_seconds_total sample in
// a Prometheus text exposition.
func parseCPUSeconds(body []byte) (float64, error) {
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	prefix := []byte(cpuMetric + " ")
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, prefix) {
			continue
		}
		fields := bytes.Fields(line[len(prefix):])
		if len(fields) == 0 {
			break
		}
		v, err := strconv.ParseFloat(string(fields[0]), 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", cpuMetric, err)
		}
		return v, nil
	}
	return 0, fmt.Errorf("no %s in %s", cpuMetric, pathMetrics)
}
