package gateway

import (
	"testing"

	"github.com/corvohq/corvo/router"
	"github.com/corvohq/corvo/statemachine"
)

// BenchmarkEnqueueRequest: the gateway's share of POST /enqueue without
// HTTP or Raft — decode the body, validate and default it into a job, and
// encode the entry the proposer sends. Run with
// CORVO_GATEWAY_NO_SERVER=1 to skip the test server.
func BenchmarkEnqueueRequest(b *testing.B) {
	rt := router.New(4)
	for _, bc := range []struct{ name, body string }{
		{"minimal", enqueueSeeds[1]},
		{"spec-example", enqueueSeeds[0]},
	} {
		b.Run(bc.name, func(b *testing.B) {
			body := []byte(bc.body)
			var buf []byte
			b.ReportAllocs()
			for b.Loop() {
				var req enqueueRequest
				if err := decodeBody(body, &req, false); err != nil {
					b.Fatal(err)
				}
				job, aerr := req.toJob(rt, MaxPayloadDefault, "")
				if aerr != nil {
					b.Fatal(aerr)
				}
				job.ID = "job_0_01HX7Y2K3M0000000000000000"
				e := statemachine.Entry{Ops: []statemachine.Op{&statemachine.EnqueueOp{Job: job}}}
				buf = e.Encode(buf[:0])
			}
		})
	}
}
