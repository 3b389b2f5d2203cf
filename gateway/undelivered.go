package gateway

import (
	"crypto/tls"
	"encoding/json"
	"syscall"
	"unsafe"

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
// data to the peek). Every connection the server serves is tracked
// (Serve); anything else (a handler test's bare context) is not probed.
func clientGone(ctx *fasthttp.RequestCtx) bool {
	switch t := ctx.Conn().(type) {
	case *trackedTLSConn:
		return t.trackedConn.departed()
	case *trackedConn:
		return t.departed()
	}
	return false
}

// departure is a connection's probe for a client that left (clientGone):
// the socket's RawConn and the function it runs, made once per connection
// (on its first probe) so that a probe allocates nothing. Only the
// goroutine serving the connection uses it.
type departure struct {
	raw  syscall.RawConn // nil: the connection has no socket to peek at
	peek func(fd uintptr) bool
	gone bool
	b    [1]byte
}

func newDeparture(raw syscall.RawConn) *departure {
	d := &departure{raw: raw}
	d.peek = func(fd uintptr) bool {
		// recvfrom(2) itself: unix.Recvfrom allocates for the sender's
		// address, which a connected socket does not give.
		n, _, errno := unix.Syscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&d.b[0])), 1, unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
		d.gone = (n == 0 && errno == 0) || errno == unix.ECONNRESET
		return true // never wait
	}
	return d
}

// probe peeks at the socket: whether its client closed it (or reset it).
func (d *departure) probe() bool {
	if d.raw == nil {
		return false
	}
	d.gone = false
	_ = d.raw.Read(d.peek)
	return d.gone
}

// departed is clientGone for a tracked connection: its socket is the one
// it wraps, or the one under its TLS.
func (c *trackedConn) departed() bool {
	if c.dep == nil {
		var raw syscall.RawConn // nil: nothing to peek at
		nc := c.Conn
		if t, ok := nc.(*tls.Conn); ok {
			nc = t.NetConn()
		}
		if sc, ok := nc.(syscall.Conn); ok {
			raw, _ = sc.SyscallConn()
		}
		c.dep = newDeparture(raw)
	}
	return c.dep.probe()
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
