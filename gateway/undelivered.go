package gateway

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"syscall"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
	"golang.org/x/sys/unix"

	"github.com/corvohq/corvo/statemachine"
)

// A fetch claims its jobs before it answers. A worker that gave up on a
// long-poll (its own timeout, a SIGTERM drain that aborts the request)
// has closed the connection by then, and the jobs would sit active, leased
// to nobody, until their leases ran out. So before an answer carrying
// claimed jobs is written, the connection is looked at: when the client
// closed it, the jobs are handed back (statemachine.UnclaimOp: pending at
// once, the attempt not counted) and the answer hands out nothing: a fetch
// answers 204, an ack that carried a fetch its ack alone (a client that
// only half-closed still reads a consistent answer).

var undeliveredJobs = metrics.GetOrCreateCounter(`corvo_fetch_undelivered_total`)

// unclaimedJobs counts the jobs workers gave back (POST /unclaim/{id}).
var unclaimedJobs = metrics.GetOrCreateCounter(`corvo_jobs_unclaimed_total`)

// clientGone reports whether ctx's client closed its connection (or reset
// it): a peek at the socket that neither blocks nor takes a byte from the
// next request. Over TLS only a TCP close is seen (a close_notify alert is
// data to the peek).
func clientGone(ctx *fasthttp.RequestCtx) bool {
	c := ctx.Conn()
	switch t := c.(type) {
	case *trackedTLSConn:
		c = t.tls.NetConn()
	case *trackedConn:
		c = t.Conn
	}
	if t, ok := c.(*tls.Conn); ok {
		c = t.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	gone := false
	var b [1]byte
	_ = raw.Read(func(fd uintptr) bool {
		n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		gone = (n == 0 && err == nil) || errors.Is(err, unix.ECONNRESET)
		return true // never wait
	})
	return gone
}

// handBack hands back the jobs a fetch claimed (claimed here, and rendered
// by other nodes in raw) when its client has gone; it reports whether it
// did (the caller then answers without them). worker is the fetch's
// worker_id.
func (s *Server) handBack(ctx *fasthttp.RequestCtx, worker string, jobs []statemachine.JobView, raw [][]byte) bool {
	if len(jobs)+len(raw) == 0 || !clientGone(ctx) {
		return false
	}
	ops := map[int][]statemachine.Op{}
	add := func(id string, attempt uint32) {
		sh, err := s.rt.ShardForJob(id)
		if err != nil || attempt == 0 {
			return
		}
		ops[sh] = append(ops[sh], &statemachine.UnclaimOp{JobID: id, Holder: statemachine.Holder{WorkerID: worker, Attempt: attempt}})
	}
	for i := range jobs {
		add(jobs[i].Job.ID, jobs[i].State.Attempt)
	}
	for _, r := range raw {
		var j struct {
			JobID   string `json:"job_id"`
			Attempt uint32 `json:"attempt"`
		}
		if json.Unmarshal(r, &j) == nil {
			add(j.JobID, j.Attempt)
		}
	}
	for sh, o := range ops {
		rs, aerr := s.propose(sh, o...)
		if aerr != nil {
			// Their leases run out as they would have.
			s.log.Warn().Str("error", aerr.msg).Int("jobs", len(o)).Msg("a fetch's client left: handing its jobs back failed")
			continue
		}
		for i := range rs {
			if rs[i].Status == statemachine.StatusOK {
				undeliveredJobs.Inc()
			}
		}
	}
	return true
}
