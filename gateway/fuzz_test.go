package gateway

import (
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/router"
)

// Seeds: the spec's examples plus edge cases; `go test` runs them all,
// `make fuzz` explores from them.
var enqueueSeeds = []string{
	`{"queue":"emails.send","payload":{"to":"user@example.com","template":"welcome"},"priority":"normal","max_retries":5,"retry_backoff":"exponential","retry_base_delay":"5s","retry_max_delay":"10m","scheduled_at":null,"expire_after":"1h","tags":{"tenant":"acme-corp"}}`,
	`{"queue":"test","payload":{"hello":"world"}}`,
	`{"queue":"q","lease_duration":1,"scheduled_at":"2026-02-12T09:00:00Z"}`,
	`{"queue":"q","unique_key":"k","unique_period":3600}`,
	`{"queue":"ai.extract","payload":{"u":1},"chain":{"steps":[{"queue":"ai.extract"},{"queue":"ai.summarize"}],"on_failure":{"queue":"alerts","payload":{"notify":"ops"}},"on_exit":{"queue":"cleanup"}}}`,
	`{"chain":{"steps":[{"queue":"a"}]}}`,
	`{"queue":"q","depends_on":["job_0_01HX7Y2K3M0000000000000000","nope"]}`,
	`{"queue":"q","payload":[1,2,3],"tags":{}}`,
	`{"queue":"","payload":null}`,
	`{"queue":"q","retry_base_delay":"-1s"}`,
	`{"queue":"q","max_retries":1e3}`,
	`{"queue":"q\u0000"}`,
	`{}`, `[]`, `null`, `"x"`, `{"queue":`, ``,
}

func FuzzDecodeEnqueue(f *testing.F) {
	for _, s := range enqueueSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req enqueueRequest
		if aerr := decodeBody(body, &req, false); aerr != nil {
			require.GreaterOrEqual(t, aerr.status, 400)
			require.Less(t, aerr.status, 500)
			require.NotEmpty(t, aerr.code)
			return
		}
		job, aerr := req.toJob(router.New(4), MaxPayloadDefault, "")
		if aerr != nil {
			require.GreaterOrEqual(t, aerr.status, 400)
			require.Less(t, aerr.status, 500)
			return
		}
		// Whatever is accepted is a job the state machine can store.
		require.NoError(t, router.ValidateQueueName(job.Queue))
		require.True(t, json.Valid(job.Payload), "payload %q", job.Payload)
		if job.Tags != nil {
			require.True(t, json.Valid(job.Tags))
		}
		require.LessOrEqual(t, job.BaseDelayMs, job.MaxDelayMs)
		require.NotZero(t, job.LeaseSeconds)
		require.NotZero(t, job.Backoff)
	})
}

func FuzzDecodeFetch(f *testing.F) {
	for _, s := range []string{
		`{"queues":["emails.send","emails.bulk"],"worker_id":"worker-abc","hostname":"pod-xyz-123","timeout":30}`,
		`{"queues":["q"],"count":10,"timeout":0.5}`,
		`{"queues":["q"],"count":0}`, `{"queues":[]}`, `{"queues":["q"],"timeout":1e309}`, `{"queues":["q"],"timeout":-0}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req fetchRequest
		if aerr := decodeBody(body, &req, false); aerr != nil {
			require.Equal(t, 400, aerr.status)
			return
		}
		timeout, count, aerr := req.validate()
		if aerr != nil {
			require.Equal(t, 400, aerr.status)
			return
		}
		require.GreaterOrEqual(t, timeout, 0*timeout)
		require.LessOrEqual(t, timeout.Seconds(), float64(maxFetchTimeout))
		require.True(t, count >= 1 && count <= maxFetchCount)
		require.NotEmpty(t, req.Queues)
	})
}

func TestAppendStringIsValidJSON(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "plain", "quote\" back\\slash", "\x00\x1f\n\t\r", "<script>&", "ünï\u2028\u2029", "\xff\xfe bad utf8", "emoji 🐦"} {
		b := appendString(nil, s)
		require.True(t, json.Valid(b), "%q → %s", s, b)
		var back string
		require.NoError(t, json.Unmarshal(b, &back))
		if utf8.ValidString(s) {
			require.Equal(t, s, back)
		}
	}
}

// FuzzSession: a session token parser takes only what this server signed
// and never panics.
func FuzzSession(f *testing.F) {
	s := &Server{cfg: Config{SessionKey: SessionKeyFrom("fuzz")}}
	good := s.newSession("0123456789abcdef", 1<<62)
	f.Add(good)
	f.Add("v1.AAAAAAAAAAAA.")
	f.Fuzz(func(t *testing.T, tok string) {
		if _, ok := s.session([]byte(tok), 1); ok && tok != good {
			t.Fatalf("a token this server did not sign was taken: %q", tok)
		}
	})
}

// FuzzQueueList: a queueList decodes every input exactly as a []string
// does — the same names, or the same error.
func FuzzQueueList(f *testing.F) {
	for _, s := range []string{`{"queues":["a","b"]}`, `{"queues":[1]}`, `{"queues":"a"}`, `{"queues":["a",{}]}`,
		`{"queues":["a\u0062","c"]}`, `{"queues":null}`, `{"queues":["a",null]}`, `{"queues":[]}`, `{"queues":["a"`,
		`{"queues":["\ud800"]}`, `{"queues":[true]}`, `{"queues":["a","a","b","c","d","e","f","g","h","i"]}`,
		`{"queues":["\xff"]}`, `{"queues":[ "a" , "b" ]}`, `{"queues":[[]]}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		var got struct {
			Queues queueList `json:"queues"`
		}
		var want struct {
			Queues []string `json:"queues"`
		}
		gerr := decodeBody([]byte(body), &got, false)
		werr := decodeBody([]byte(body), &want, false)
		if werr != nil {
			require.NotNil(t, gerr, "%q", body)
			require.Equal(t, werr.msg, gerr.msg, "%q", body)
			return
		}
		require.Nil(t, gerr, "%q", body)
		require.Equal(t, len(want.Queues), len(got.Queues), "%q", body)
		for i := range want.Queues {
			require.Equal(t, want.Queues[i], got.Queues[i], "%q", body)
		}
	})
}
