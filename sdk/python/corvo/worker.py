"""The worker runtime: fetches jobs of its registered queues and runs their
handlers on a pool of threads, with batched heartbeats, progress,
checkpoints, usage, cancellation and a SIGTERM drain."""

from __future__ import annotations

import os
import queue as _queue
import signal
import socket
import threading
import time
import traceback
from typing import Any, Callable, Dict, List, Optional

from .client import Cancel, Client
from .errors import BudgetExceeded, CorvoError, JobCancelled, LeaseLost, ProviderError, WorkerShutdown
from .types import AckItem, FetchedJob, FetchRequest, HeartbeatAnswer, HeartbeatJob, Usage

__all__ = ["Worker", "JobContext", "Handler"]

Handler = Callable[[FetchedJob, "JobContext"], Any]
"""A handler: ``handler(job, ctx)``. Its return value (any JSON value; None
for none) acks the job; an exception fails it."""

# As the Go SDK's completer (sdk/go/completer.go): the first waiting ack
# waits this long for others to share its request while handlers still run;
# one request carries at most this many acks; at most this many ack
# requests are in flight (acks that finish meanwhile wait: batches grow).
ACK_WINDOW = 0.001
MAX_ACK_BATCH = 1000
MAX_ACK_REQUESTS = 4

# Error codes for which an ack of an ack batch is sent again alone.
_RETRY_ALONE = ("overloaded", "rate_limited", "unavailable", "shutting_down")

# A usage report's counts (added up) and names (the latest wins).
_USAGE_COUNTS = ("input_tokens", "output_tokens", "cache_creation_tokens", "cache_read_tokens", "latency_ms")
_USAGE_NAMES = ("model", "provider")


def _add_usage(u: Usage, o: Dict[str, Any]) -> Usage:
    """u plus o: tokens, cost and latency added, o's model and provider replacing u's when set."""
    out: Dict[str, Any] = dict(u)
    for k in _USAGE_COUNTS:
        if o.get(k):
            out[k] = out.get(k, 0) + o[k]
    if o.get("cost_usd"):
        # Costs are kept to 1e-9 USD by the server: sums stay on that grid.
        out["cost_usd"] = round(out.get("cost_usd", 0) + o["cost_usd"], 9)
    for k in _USAGE_NAMES:
        if o.get(k):
            out[k] = o[k]
    return out  # type: ignore[return-value]


class JobContext:
    """A running job's context: progress, checkpoints, usage, cancellation.

    Attributes:
        job: the fetched job (``job_id``, ``queue``, ``payload``, ``attempt``,
            ``tags``, ``checkpoint``: the last checkpoint of an earlier
            attempt, to resume from, and ``routing``: ``{"target",
            "index"}``, the model to call, for a job enqueued with routing).
        reason: why the job was cancelled (:class:`~corvo.JobCancelled`,
            :class:`~corvo.LeaseLost`, :class:`~corvo.BudgetExceeded` or
            :class:`~corvo.WorkerShutdown`), None while it runs.
    """

    def __init__(self, worker: "Worker", job: FetchedJob):
        self.job = job
        self.reason: Optional[BaseException] = None
        self._w = worker
        self._event = threading.Event()
        self._progress: Any = None
        self._checkpoint: Any = job.get("checkpoint")
        self._exit = False
        # _lock guards the usage: the attempt's so far (report_usage), what a
        # heartbeat the server applied reported of it, and what the one in
        # flight reports.
        self._lock = threading.Lock()
        self._usage: Usage = {}
        self._reported = False
        self._hb_usage: Usage = {}
        self._hb_sent: Usage = {}
        self._over_budget = False

    @property
    def cancel_event(self) -> threading.Event:
        """Set when the server cancels the job (seen on the next heartbeat),
        its lease is lost, a heartbeat says it is past a per-job budget (unless
        the worker's ``continue_over_budget``), or the drain's grace runs out:
        stop, the server has moved on. ``ctx.cancel_event.wait(5)`` sleeps 5 s
        unless cancelled."""
        return self._event

    @property
    def cancelled(self) -> bool:
        """True once :attr:`cancel_event` is set."""
        return self._event.is_set()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Sleeps up to ``timeout`` seconds (None: until cancelled); True when cancelled."""
        return self._event.wait(timeout)

    def raise_if_cancelled(self) -> None:
        """Raises :attr:`reason` once the job is cancelled."""
        if self._event.is_set() and self.reason is not None:
            raise self.reason

    def progress(self, value: Any) -> None:
        """Records progress (any JSON value; ``{"current", "total", "message"}``
        is what the UI and the job's timeline show as "450/1000 Sending
        batch"). It travels with the next heartbeat, or with the next
        checkpoint if that comes first."""
        self._progress = value

    def checkpoint(self, value: Any) -> None:
        """Stores resumable state on the server now (it extends the lease too,
        and carries the progress recorded since); a retried job gets it back
        as ``job["checkpoint"]``."""
        self._checkpoint = value
        j = self.job
        hb: HeartbeatJob = {"attempt": j["attempt"], "checkpoint": value}
        if self._progress is not None:
            hb["progress"] = self._progress
        st = self._w.client.heartbeat_answers(self._w.id, {j["job_id"]: hb})
        self._w._apply(st)

    def exit_chain(self) -> None:
        """Makes the ack of a chain step skip the chain's remaining steps (step_status "exit")."""
        self._exit = True

    def report_usage(self, usage: Optional[Usage] = None, **fields: Any) -> None:
        """Adds what an LLM call of the job used to the attempt's usage
        (``input_tokens``, ``output_tokens``, ``cache_creation_tokens``,
        ``cache_read_tokens``, ``model``, ``provider``, ``cost_usd``,
        ``latency_ms``; as a dict, keywords or both). Heartbeats carry the
        running total (the server keeps the attempt's latest), and the job's
        ack or fail carries what no applied heartbeat has reported yet, so the
        server's totals come out exact."""
        o: Dict[str, Any] = dict(usage or {})
        o.update(fields)
        unknown = set(o) - set(_USAGE_COUNTS) - set(_USAGE_NAMES) - {"cost_usd"}
        if unknown:
            raise TypeError("corvo: unknown usage field(s): %s" % ", ".join(sorted(unknown)))
        with self._lock:
            self._usage = _add_usage(self._usage, o)
            self._reported = True

    @property
    def usage(self) -> Usage:
        """The attempt's usage reported so far."""
        with self._lock:
            return dict(self._usage)  # type: ignore[return-value]

    @property
    def budget_exceeded(self) -> bool:
        """True once a heartbeat has said the job's cost (all its attempts) is
        past a per-job budget covering it."""
        return self._over_budget

    def _heartbeat_usage(self) -> Optional[Usage]:
        """The usage a heartbeat carries now (None: none reported), remembered as the one in flight."""
        with self._lock:
            if not self._reported:
                return None
            self._hb_sent = dict(self._usage)  # type: ignore[assignment]
            return self._hb_sent

    def _heartbeat_applied(self) -> None:
        with self._lock:
            self._hb_usage = self._hb_sent

    def _usage_left(self) -> Optional[Usage]:
        """What the job's ack or fail must report: the usage no applied
        heartbeat reported (None: none)."""
        with self._lock:
            if not self._reported:
                return None
            u: Dict[str, Any] = {}
            for k in _USAGE_COUNTS:
                d = self._usage.get(k, 0) - self._hb_usage.get(k, 0)  # type: ignore[misc]
                if d > 0:
                    u[k] = d
            cost = round(self._usage.get("cost_usd", 0) - self._hb_usage.get("cost_usd", 0), 9)
            if cost > 0:
                u["cost_usd"] = cost
            nothing = not u
            for k in _USAGE_NAMES:
                if self._usage.get(k):
                    u[k] = self._usage[k]  # type: ignore[literal-required]
            if nothing and self._hb_usage:
                return None  # the heartbeats reported it all
            return u  # type: ignore[return-value]

    def _abort(self, reason: BaseException) -> None:
        if not self._event.is_set():
            self.reason = reason
            self._event.set()


class _PendingAck:
    """A slot's ack waiting to be sent. Its lock is taken from the start: the
    slot's thread blocks on it; it is released once, with the slot's next job
    (settled) or to make the thread the next sender (lead)."""

    __slots__ = ("item", "lock", "batch", "next")

    def __init__(self, item: AckItem):
        self.item = item
        self.lock = threading.Lock()
        self.lock.acquire()
        self.batch: Optional[List["_PendingAck"]] = None  # set when made the next sender: what to send
        self.next: Optional["JobContext"] = None


class Worker:
    """Fetches jobs of its registered queues and runs their handlers, each on
    one of ``concurrency`` threads.

    >>> worker = Worker(Client("http://localhost:8080"), concurrency=10)  # doctest: +SKIP
    >>> @worker.register("emails.send")  # doctest: +SKIP
    ... def send(job, ctx):
    ...     return {"sent": True}
    >>> worker.run()  # until SIGTERM/SIGINT or worker.stop(): then drains  # doctest: +SKIP

    The runtime fetches as many jobs as it has free slots; an ack carries
    the slot's next fetch (one request per job while jobs are pending); acks
    that finish together share one ``POST /api/v1/ack/batch`` with a fetch for
    the slots they free. One heartbeat request carries every running job.

    Args:
        client: the :class:`~corvo.Client`.
        id: the worker's ID as the server sees it (default ``hostname-pid``).
        hostname: default ``socket.gethostname()``.
        concurrency: jobs run at once (default 10).
        fetch_timeout: long-poll of a fetch in seconds (default 30, as the Go
            and TypeScript SDKs'). A drain closes the fetch in flight at once:
            the server hands back what it had claimed for it (docs/api.md,
            ``POST /api/v1/fetch``), so an idle worker drains at once.
        heartbeat_interval: seconds between heartbeats (default 15; keep it
            well under the jobs' lease).
        shutdown_grace: how long a drain waits for running handlers, in
            seconds (default 30).
        handle_signals: SIGTERM and SIGINT start the drain while :meth:`run`
            runs in the main thread (default True).
        on_error: called with errors the worker has nobody to give to (a
            failed ack, the server away); default: none.
        continue_over_budget: keeps a job's :attr:`JobContext.cancel_event`
            unset when a heartbeat says the job is past a per-job budget: the
            handler reads :attr:`JobContext.budget_exceeded` instead. Default
            False: the job is cancelled with :class:`~corvo.BudgetExceeded`.
    """

    def __init__(
        self,
        client: Client,
        *,
        id: Optional[str] = None,
        hostname: Optional[str] = None,
        concurrency: int = 10,
        fetch_timeout: float = 30.0,
        heartbeat_interval: float = 15.0,
        shutdown_grace: float = 30.0,
        handle_signals: bool = True,
        on_error: Optional[Callable[[BaseException], None]] = None,
        continue_over_budget: bool = False,
    ):
        self.client = client
        self.hostname = hostname or socket.gethostname()
        self.id = id or "%s-%d" % (self.hostname, os.getpid())
        self.concurrency = concurrency if concurrency > 0 else 10
        self.fetch_timeout = fetch_timeout if fetch_timeout > 0 else 30.0
        self.heartbeat_interval = heartbeat_interval if heartbeat_interval > 0 else 15.0
        self.shutdown_grace = shutdown_grace if shutdown_grace > 0 else 30.0
        self.handle_signals = handle_signals
        self.on_error = on_error
        self.continue_over_budget = continue_over_budget
        self._handlers: Dict[str, Handler] = {}
        self._queues: List[str] = []
        # _cond guards the slots, the drain and the count of slots acking;
        # _mu the running jobs and the waiting acks.
        self._cond = threading.Condition(threading.Lock())
        self._mu = threading.Lock()
        self._inflight: Dict[str, JobContext] = {}
        self._slots_used = 0
        self._draining = False
        self._drain_started = 0.0
        self._stopped = threading.Event()
        self._stop_fetch = Cancel()  # stop() closes the fetch in flight with it
        self._jobs: "_queue.SimpleQueue[Optional[JobContext]]" = _queue.SimpleQueue()
        self._acks: List[_PendingAck] = []
        self._ack_requests = 0
        self._acking = 0
        self._plain_acks = False
        self._plain_batch = False
        # Set when the heartbeat in flight is answered (None: none in
        # flight): a finished job's usage waits for it (_usage_left).
        self._hb_round: Optional[threading.Event] = None

    def register(self, queue: str, handler: Optional[Handler] = None) -> Any:
        """Sets the handler of a queue (before :meth:`run`). Without ``handler``
        it is a decorator: ``@worker.register("emails.send")``."""
        if handler is None:

            def deco(fn: Handler) -> Handler:
                self._handlers[queue] = fn
                return fn

            return deco
        self._handlers[queue] = handler
        return self

    @property
    def running(self) -> int:
        """How many jobs the worker runs: handlers running, and jobs claimed
        for a slot that has yet to start them."""
        return len(self._inflight)

    def _error(self, err: BaseException) -> None:
        if self.on_error is not None:
            try:
                self.on_error(err)
            except Exception:
                pass

    def _fetch_body(self, count: int, timeout: float) -> FetchRequest:
        return {"queues": self._queues, "worker_id": self.id, "hostname": self.hostname, "timeout": timeout, "count": count}

    # ---- run and drain -------------------------------------------------

    def run(self) -> None:
        """Fetches and runs jobs until :meth:`stop` (or SIGTERM/SIGINT with
        ``handle_signals``), then drains: stops fetching, lets running
        handlers finish for up to ``shutdown_grace`` seconds, and fails the
        rest with ``worker_shutdown`` and their last checkpoint (their
        :attr:`JobContext.cancel_event` is set), so the server retries them
        from there. The fetch in flight is closed at once (the server hands
        back what it claimed for it). Returns once drained."""
        if not self._handlers:
            raise RuntimeError("corvo: no handler registered")
        self._queues = list(self._handlers)
        previous: Dict[int, Any] = {}
        if self.handle_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, self._on_signal)
        hb = threading.Thread(target=self._heartbeat_loop, name="corvo-heartbeat", daemon=True)
        hb.start()
        slots = [threading.Thread(target=self._slot_loop, name="corvo-slot-%d" % i, daemon=True) for i in range(self.concurrency)]
        for t in slots:
            t.start()
        try:
            self._fetch_loop()
            self._drain()
        finally:
            for sig, h in previous.items():
                signal.signal(sig, h)
            self._stopped.set()
            for _ in slots:
                self._jobs.put(None)
            hb.join()

    def _on_signal(self, *_: Any) -> None:
        # A signal handler runs on the main thread between two bytecodes,
        # perhaps while it holds a lock stop() takes: stop from another thread.
        threading.Thread(target=self.stop, name="corvo-stop", daemon=True).start()

    def stop(self) -> None:
        """Starts the drain (as SIGTERM does); :meth:`run` returns once it is over."""
        with self._cond:
            if self._draining:
                return
            self._draining = True
            self._drain_started = time.monotonic()
            self._cond.notify_all()
        # Closes the long-poll in flight (its connection: the server hands
        # back what it claimed for it) and ends a retry's wait.
        self._stop_fetch.cancel()

    def _fetch_loop(self) -> None:
        c = self._cond
        while True:
            with c:
                while self._slots_used >= self.concurrency and not self._draining:
                    c.wait()
                if self._draining:
                    return
                free = self.concurrency - self._slots_used
                self._slots_used += free  # lease only as many jobs as there are free slots
            jobs: List[FetchedJob] = []
            try:
                # A drain closes it: the server hands back what it claimed for it.
                jobs = self.client.fetch(
                    self._queues,
                    worker_id=self.id,
                    hostname=self.hostname,
                    timeout=self.fetch_timeout,
                    count=free,
                    cancel=self._stop_fetch,
                )
            except Exception as err:
                if not self._draining:
                    self._error(err)
                    with c:
                        c.wait_for(lambda: self._draining, 0.5)  # the server is away: try again shortly
            with c:
                self._slots_used -= free - len(jobs)
                draining = self._draining
            if draining:
                self._hand_back(jobs)
                with c:
                    self._slots_used -= len(jobs)
                return
            # Every job of the answer counts as running before a slot runs
            # one: a handler that returns at once must not find the worker
            # idle and send its ack alone (see _ack).
            for ctx in self._start(jobs):
                self._jobs.put(ctx)

    def _drain(self) -> None:
        c = self._cond
        with c:
            deadline = self._drain_started + self.shutdown_grace
            while self._slots_used > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                c.wait(left)
            late = self._slots_used > 0
        if late:
            self._fail_remaining()
        with c:
            c.wait_for(lambda: self._acking == 0)

    # ---- slots ---------------------------------------------------------

    def _slot_loop(self) -> None:
        while True:
            ctx = self._jobs.get()
            if ctx is None:
                return
            try:
                while ctx is not None:
                    ctx = self._handle(ctx)
            except Exception as err:  # a bug here must not kill the slot
                self._error(err)
            finally:
                with self._cond:
                    self._slots_used -= 1
                    self._cond.notify_all()

    def _start(self, jobs: List[FetchedJob]) -> List[JobContext]:
        """Registers jobs as running (heartbeats carry them from now on)."""
        ctxs = [JobContext(self, j) for j in jobs]
        with self._mu:
            for ctx in ctxs:
                self._inflight[ctx.job["job_id"]] = ctx
        return ctxs

    def _handle(self, ctx: JobContext) -> Optional[JobContext]:
        """Runs a started job and reports its outcome; answers the slot's next
        job, started (None: none)."""
        job = ctx.job
        jid = job["job_id"]
        with self._mu:
            if self._inflight.get(jid) is not ctx:
                return None  # failed by the drain before it ran
        h = self._handlers.get(job["queue"])
        failure: Optional[BaseException] = None
        result: Any = None
        try:
            if h is None:
                raise LookupError("no handler for queue %s" % job["queue"])
            result = h(job, ctx)
        except Exception as err:
            failure = err
        with self._mu:
            if self._inflight.get(jid) is not ctx:
                return None  # failed by the drain already
            del self._inflight[jid]
            hb_round = self._hb_round  # a heartbeat in flight may carry this job's usage
        with self._cond:
            self._acking += 1
        try:
            if ctx.cancelled and isinstance(ctx.reason, (JobCancelled, LeaseLost)):
                return None  # the server has moved on: nothing to report
            if hb_round is not None:
                hb_round.wait(30)
            usage = ctx._usage_left()
            if failure is not None:
                try:
                    self.client.fail(
                        jid,
                        str(failure) or type(failure).__name__,
                        backtrace="".join(traceback.format_exception(type(failure), failure, failure.__traceback__)),
                        checkpoint=ctx._checkpoint,
                        worker_id=self.id,
                        attempt=job["attempt"],
                        usage=usage,
                        provider_error=isinstance(failure, ProviderError),
                    )
                except Exception as err:
                    self._error(err)
                return None
            item: AckItem = {"job_id": jid, "worker_id": self.id, "attempt": job["attempt"]}
            if result is not None:
                item["result"] = result
            if usage is not None:
                item["usage"] = usage
            if ctx._exit:
                item["step_status"] = "exit"
            return self._ack(item)
        finally:
            with self._cond:
                self._acking -= 1
                if self._acking == 0:
                    self._cond.notify_all()

    # ---- the completer: acks of slots that finish together share a request

    def _ack(self, item: AckItem) -> Optional[JobContext]:
        """Queues a slot's ack; answers the slot's next job (None: none).

        While fewer than MAX_ACK_REQUESTS ack requests are out, the ack's own
        thread sends it at once, with every ack waiting (up to a request's
        worth); otherwise it waits, and a sender that finishes hands the
        sending on to the first waiting thread, whose request carries the
        acks that gathered meanwhile (the batches grow under load)."""
        p = _PendingAck(item)
        with self._mu:
            wait = self._ack_requests >= MAX_ACK_REQUESTS
            if wait:
                self._acks.append(p)
            else:
                self._ack_requests += 1
        if wait:
            p.lock.acquire()  # settled, or made the next sender
            if p.batch is None:
                return p.next
            batch = p.batch
        else:
            if self._inflight and not self._draining:
                time.sleep(ACK_WINDOW)  # handlers still run: let their acks join
            with self._mu:
                batch = [p] + self._acks[: MAX_ACK_BATCH - 1]
                del self._acks[: MAX_ACK_BATCH - 1]
        # All running before any slot has its job (as the fetch loop does).
        ctxs = self._start(self._send_acks([b.item for b in batch]))
        for i, b in enumerate(batch):
            b.next = ctxs[i] if i < len(ctxs) else None
            if b is not p:
                b.lock.release()
        # Take what gathered meanwhile and hand it to the first of those
        # slots to send.
        with self._mu:
            nxt = self._acks[:MAX_ACK_BATCH]
            del self._acks[:MAX_ACK_BATCH]
            if not nxt:
                self._ack_requests -= 1
        if nxt:
            nxt[0].batch = nxt
            nxt[0].lock.release()
        return p.next

    def _send_acks(self, items: List[AckItem]) -> List[FetchedJob]:
        jobs: List[FetchedJob] = []
        try:
            jobs = self._ack_one(items[0]) if len(items) == 1 else self._ack_many(items)
        except Exception as err:
            self._error(err)
        if self._draining and jobs:
            self._hand_back(jobs)  # claimed as the worker began to drain
            return []
        if len(jobs) > len(items):
            self._hand_back(jobs[len(items) :])  # more than asked for
            jobs = jobs[: len(items)]
        return jobs

    def _ack_one(self, a: AckItem) -> List[FetchedJob]:
        """Acks a lone job with the slot's next fetch, unless draining or the server refuses the field."""
        kw = {k: v for k, v in a.items() if k != "job_id"}
        if self._draining or self._plain_acks:
            self.client.ack(a["job_id"], **kw)
            return []
        try:
            return self.client.ack_and_fetch(a["job_id"], self._fetch_body(1, 0), **kw).get("jobs") or []
        except CorvoError as err:
            if err.status != 400:
                raise
            self._plain_acks = True  # a server without ack-and-fetch refused the field, and acked nothing
            self.client.ack(a["job_id"], **kw)
            return []

    def _ack_many(self, acks: List[AckItem]) -> List[FetchedJob]:
        """Acks many jobs in one request with a fetch for the slots they free."""
        out = None
        if not self._draining and not self._plain_batch:
            try:
                out = self.client.ack_batch_and_fetch(acks, self._fetch_body(len(acks), 0))
            except CorvoError as err:
                if err.status != 400:
                    raise
                self._plain_batch = True
        if out is None:
            out = self.client.ack_batch(acks)
        # An ack not committed for a reason a lone ack is retried for goes again alone.
        by_id = {a["job_id"]: a for a in acks}
        for f in out.get("errors") or []:
            if f.get("code") in _RETRY_ALONE and f.get("job_id") in by_id:
                a = by_id[f["job_id"]]
                try:
                    self.client.ack(a["job_id"], **{k: v for k, v in a.items() if k != "job_id"})
                except Exception as err:
                    self._error(err)
        return out.get("jobs") or []

    def _hand_back(self, jobs: List[FetchedJob]) -> None:
        """Fails jobs the worker claimed but will not run, so the server retries them at once."""
        for j in jobs:
            try:
                self.client.fail(j["job_id"], "worker_shutdown", worker_id=self.id, attempt=j["attempt"])
            except Exception as err:
                self._error(err)

    def _fail_remaining(self) -> None:
        """Fails the jobs still running when the grace period ends, with their
        checkpoints, and sets their cancel events."""
        with self._mu:
            left = list(self._inflight.values())
            self._inflight.clear()
        for ctx in left:
            try:
                self.client.fail(
                    ctx.job["job_id"],
                    "worker_shutdown",
                    checkpoint=ctx._checkpoint,
                    worker_id=self.id,
                    attempt=ctx.job["attempt"],
                    usage=ctx._usage_left(),
                )
            except Exception as err:
                self._error(err)
        for ctx in left:
            ctx._abort(WorkerShutdown())

    # ---- heartbeats ----------------------------------------------------

    def _heartbeat_loop(self) -> None:
        while not self._stopped.wait(self.heartbeat_interval):
            jobs: Dict[str, HeartbeatJob] = {}
            with self._mu:
                ctxs = dict(self._inflight)
                for jid, ctx in ctxs.items():
                    hj: HeartbeatJob = {"attempt": ctx.job["attempt"], "progress": ctx._progress, "checkpoint": ctx._checkpoint}
                    usage = ctx._heartbeat_usage()
                    if usage is not None:
                        hj["usage"] = usage
                    jobs[jid] = hj
                if not jobs:
                    continue
                hb_round = self._hb_round = threading.Event()
            try:
                answers = self.client.heartbeat_answers(self.id, jobs)
                for jid, a in answers.items():
                    if jid in ctxs and a.get("status") == "ok":
                        ctxs[jid]._heartbeat_applied()  # the server applied its usage
                self._apply(answers)
            except Exception as err:
                if not self._stopped.is_set():
                    self._error(err)
            finally:
                with self._mu:
                    self._hb_round = None
                hb_round.set()

    def _apply(self, answers: Dict[str, HeartbeatAnswer]) -> None:
        """Acts on heartbeat answers: cancelled or lost jobs get their cancel
        event set, and so do jobs past a per-job budget (unless
        ``continue_over_budget``), which :attr:`JobContext.budget_exceeded`
        reports from then on."""
        for jid, a in answers.items():
            ctx = self._inflight.get(jid)
            if ctx is None:
                continue
            if a.get("budget_exceeded"):
                ctx._over_budget = True
            if ctx.cancelled:
                continue
            s = a.get("status")
            if s == "cancel":
                ctx._abort(JobCancelled())
            elif s in ("lost", "not_found"):
                ctx._abort(LeaseLost())
            elif a.get("budget_exceeded") and not self.continue_over_budget:
                ctx._abort(BudgetExceeded())
