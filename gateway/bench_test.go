package gateway

import (
	"context"
	"testing"

	"github.com/corvohq/corvo/auth"
	"github.com/corvohq/corvo/router"
	"github.com/corvohq/corvo/statemachine"
	"github.com/valyala/fasthttp"
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

// staticKeys is a key table that never changes (benchmarks).
type staticKeys struct{ st *auth.State }

func (k staticKeys) Keys() *auth.State { return k.st }
func (k staticKeys) ProposeKeys(context.Context, auth.Cmd) (bool, error) {
	return false, nil
}

// BenchmarkAuthorize: what checking a Bearer key adds to a request — parse
// the header, find the key, hash and compare it, check the role, note its
// use — against an open server's check of a request without one. Run with
// CORVO_GATEWAY_NO_SERVER=1.
func BenchmarkAuthorize(b *testing.B) {
	key, id, hash := auth.NewKey()
	st, _ := auth.Empty.Apply(auth.Cmd{Op: "put", Key: &auth.Key{ID: id, Hash: hash, Name: "bench", Namespace: "default", Role: auth.RoleProducer, Enabled: true}})
	for _, bc := range []struct {
		name string
		mode AuthMode
		key  string
	}{{"open-no-key", AuthOpen, ""}, {"keys-bearer", AuthRequired, key}} {
		b.Run(bc.name, func(b *testing.B) {
			s := &Server{cfg: Config{Auth: bc.mode, Keys: staticKeys{st}}}
			var ctx fasthttp.RequestCtx
			if bc.key != "" {
				ctx.Request.Header.Set("Authorization", "Bearer "+bc.key)
			}
			b.ReportAllocs()
			for b.Loop() {
				if !s.authorize(&ctx, auth.PermJobsEnqueue) {
					b.Fatal(string(ctx.Response.Body()))
				}
			}
		})
	}
}
