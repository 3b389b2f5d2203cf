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
from typing import Any, Callable, Dict, List, Optional, Tuple

from .client import Cancel, Client
from .errors import BudgetExceeded, CorvoError, JobCancelled, LeaseLost, NotFoundError, ProviderError, WorkerShutdown
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

# The ack senders' work: the group whose acks to send first (_ANY: the
# first waiting ack's), or _STOP.
_ANY = object()
_STOP = object()

# What Worker._holds.pop answers for a hold the other side took (_Hold).
_TAKEN = object()

# How often a running worker checks whether its queues' nodes changed (a
# leader moved, a node left), in seconds.
REGROUP_EVERY = 1.0

# A worker groups its queues by node only with at least this many slots per
# group (the Go SDK's slotsPerGroup). Each poller holds a slot while its node
# has nothing, so while one node has all the work the others' pollers keep
# (groups - 1) slots from it: under a quarter of the slots this way. With
# fewer slots the worker fetches over every queue at once.
SLOTS_PER_GROUP = 4

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
        self._group: Optional[_FetchGroup] = None  # the queues its ack fetches the slot's next job from
        # _started: its handler was called (guarded by the worker's _mu): at
        # the end of the drain's grace a started job is failed, one held and
        # never started is given back.
        self._started = False
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


# A worker over queues on several nodes of a cluster fetches from each node
# apart, as the Go SDK's (sdk/go/groups.go): its queues are grouped by the
# node leading their shard, and each group has a poller that long-polls that
# node for the group's queues alone, so every fetch is one the node answers
# itself instead of a fetch the node must spread over the others (a claim
# and a wait on every other node per fetch). An ack's fetch names its job's
# group, whose node the ack goes to. The worker's slots are shared: a
# group's poller holds one slot while its node has nothing (so a job there
# is delivered at once) and takes more as its answers come back full, and a
# slot that finished a job goes on fetching from its group unless another
# group's poller waits for a slot and this group holds more than its share
# of them: then the slot is given back for that poller (fairness between
# nodes, as the server's rotation gives it between the queues of one
# fetch). Without the placement (one node, or placement=False) there is one
# group: every queue, fetched as before.


class _FetchGroup:
    """The worker's queues whose shards one node leads. waiting: its poller
    waits for a free slot; chains: slots running its jobs (each fetching its
    next one from the group on its ack). Both are guarded by the worker's
    _cond."""

    __slots__ = ("node", "queues", "waiting", "chains")

    def __init__(self, node: str, queues: List[str]):
        self.node = node  # the node's base URL ("": not routed)
        self.queues = queues
        self.waiting = 0
        self.chains = 0

    def __repr__(self) -> str:
        return "_FetchGroup(%r, %r)" % (self.node, self.queues)


def _same_groups(a: List[_FetchGroup], b: List[_FetchGroup]) -> bool:
    """Whether two groupings put the same queues on the same nodes."""
    return len(a) == len(b) and all(x.node == y.node and x.queues == y.queues for x, y in zip(a, b))


class _PendingAck:
    """A slot's ack waiting to be sent, with how many jobs its fetch asks for
    the slot (want: its next job, and one to hold after a quick handler;
    Worker._run_slot). Its lock is taken from the start and released once
    the ack is answered, with the slot's jobs in ``next`` (already running).
    group: the slot's, whose queues those jobs come from."""

    __slots__ = ("item", "group", "want", "lock", "next")

    def __init__(self, item: AckItem, group: Optional[_FetchGroup], want: int):
        self.item = item
        self.group = group
        self.want = want
        self.lock = threading.Lock()
        self.lock.acquire()
        self.next: List["JobContext"] = []

    def wait(self) -> List["JobContext"]:
        """The slot's jobs, once the ack is answered."""
        self.lock.acquire()
        return self.next


class _Hold:
    """The jobs a slot holds while a handler runs (ready, and those its ack
    in flight brings), watched by the worker's hold thread: past deadline
    it takes them (done made then, as most holds end in time) and gives
    them back, and sets done once they are. Who takes the hold out of
    Worker._holds (a dict.pop, atomic) owns it: the hold thread, or the slot
    once its handler returned."""

    __slots__ = ("ready", "answer", "deadline", "done")

    def __init__(self, ready: List["JobContext"], answer: Optional[_PendingAck], deadline: float):
        self.ready = ready
        self.answer = answer
        self.deadline = deadline
        self.done: Optional[threading.Event] = None


class Worker:
    """Fetches jobs of its registered queues and runs their handlers, each on
    one of ``concurrency`` threads.

    >>> worker = Worker(Client("http://localhost:8080"), concurrency=10)  # doctest: +SKIP
    >>> @worker.register("emails.send")  # doctest: +SKIP
    ... def send(job, ctx):
    ...     return {"sent": True}
    >>> worker.run()  # until SIGTERM/SIGINT or worker.stop(): then drains  # doctest: +SKIP

    The runtime fetches as many jobs as it has free slots; an ack carries
    the slot's next fetch (one request per job while jobs are pending), and
    after a quick handler one job more, which the slot holds and starts as
    soon as its handler returns (``prefetch_under``); acks that finish
    together share one ``POST /api/v1/ack/batch`` with a fetch for the slots
    they free. One heartbeat request carries every running job.
    When the client knows the cluster's placement, the queues are grouped
    by the node leading their shard and each node is fetched from apart
    (its queues only), the slots shared between the nodes.

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
        prefetch_under: a slot whose handler took at most this many seconds
            holds its next job while it runs one (its ack fetches one job
            more), so it starts that job the moment the handler returns
            instead of after the ack's round trip. After a longer handler the
            slot holds nothing: a held job waits for the handler before it
            (its lease kept by the heartbeats) for at most 4 × this, after
            which it is given back (unclaimed, its attempt not counted) for
            any worker to run. Default 0.05; negative: never hold (as the Go
            SDK's ``PrefetchUnder``).
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
        prefetch_under: float = 0.05,
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
        self.prefetch_under = prefetch_under
        self._handlers: Dict[str, Handler] = {}
        self._queues: List[str] = []
        # _groups are the queues grouped by node, a poller each (the current
        # grouping; _keep reads it).
        self._groups: List[_FetchGroup] = []
        # _cond guards the slots, the groups' counts, the drain and the
        # count of slots acking; _mu the running jobs and the waiting acks.
        self._cond = threading.Condition(threading.Lock())
        self._mu = threading.Lock()
        self._inflight: Dict[str, JobContext] = {}
        self._slots_used = 0
        self._draining = False
        self._drain_started = 0.0
        self._stopped = threading.Event()
        # stop() closes the pollers' fetches in flight with them (a Cancel
        # ends one request at a time: one each).
        self._fetch_cancels: List[Cancel] = []
        self._jobs: "_queue.SimpleQueue[Optional[JobContext]]" = _queue.SimpleQueue()
        # The acks waiting for a request (_mu), the requests out, and the
        # sender threads' work (_sender_loop).
        self._acks: List[_PendingAck] = []
        self._ack_requests = 0
        self._senders: "_queue.SimpleQueue[Any]" = _queue.SimpleQueue()
        # The slots' holds while their handlers run (_hold_loop).
        self._holds: Dict[_Hold, None] = {}
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

    def _fetch_body(self, g: Optional[_FetchGroup], count: int, timeout: float) -> FetchRequest:
        queues = self._queues if g is None else g.queues
        return {"queues": queues, "worker_id": self.id, "hostname": self.hostname, "timeout": timeout, "count": count}

    # ---- run and drain -------------------------------------------------

    def run(self) -> None:
        """Fetches and runs jobs until :meth:`stop` (or SIGTERM/SIGINT with
        ``handle_signals``), then drains: stops fetching, lets running
        handlers finish for up to ``shutdown_grace`` seconds, and fails the
        rest with ``worker_shutdown`` and their last checkpoint (their
        :attr:`JobContext.cancel_event` is set), so the server retries them
        from there. The fetches in flight are closed at once (the server
        hands back what it claimed for them). Returns once drained."""
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
        senders = [threading.Thread(target=self._sender_loop, name="corvo-ack-%d" % i, daemon=True) for i in range(MAX_ACK_REQUESTS)]
        for t in slots + senders:
            t.start()
        holds = threading.Thread(target=self._hold_loop, name="corvo-holds", daemon=True)
        if self.prefetch_under >= 0:
            holds.start()
        try:
            self._fetch_loop()
            self._drain()
        finally:
            for sig, h in previous.items():
                signal.signal(sig, h)
            self._stopped.set()
            for _ in slots:
                self._jobs.put(None)
            for _ in senders:
                self._senders.put(_STOP)
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
            cancels = list(self._fetch_cancels)
        # Closes the long-polls in flight (their connections: the server
        # hands back what it claimed for them) and ends a retry's wait.
        for cancel in cancels:
            cancel.cancel()

    def _fetch_loop(self) -> None:
        """Runs a poller per group of the queues (one without the placement)
        until the drain; every REGROUP_EVERY seconds it groups the queues
        again and, when the grouping changed, replaces the pollers."""
        c = self._cond
        # Reads the placement before the first fetch (for at most the read's
        # timeout; without it the worker starts with one group and regroups
        # once it is known).
        self.client._placement_now()
        groups = self._group_queues()
        while True:
            with c:
                if self._draining:
                    return
                self._groups = groups  # _keep reads it
            done = threading.Event()  # set when the grouping changes
            pollers: List[threading.Thread] = []
            cancels: List[Cancel] = []
            for g in groups:
                cancel = Cancel()
                with c:
                    self._fetch_cancels.append(cancel)
                    draining = self._draining
                if draining:
                    cancel.cancel()  # stop() came before it was listed
                cancels.append(cancel)
                t = threading.Thread(target=self._poll, args=(g, len(groups) > 1, done, cancel), name="corvo-fetch", daemon=True)
                t.start()
                pollers.append(t)
            groups = self._regroup(groups)
            done.set()
            with c:
                c.notify_all()  # a poller waiting for a slot stops
            for t in pollers:
                t.join()
            with c:
                for cancel in cancels:
                    self._fetch_cancels.remove(cancel)

    def _group_queues(self) -> List[_FetchGroup]:
        """The queues grouped by the node leading their shard, in the order of
        their first queue (queues without a route form their own group); one
        group of all of them without the placement, or with fewer than
        SLOTS_PER_GROUP slots per group."""
        client = self.client
        if client._placement() is None:
            return [_FetchGroup("", list(self._queues))]
        groups: List[_FetchGroup] = []
        at: Dict[str, _FetchGroup] = {}
        for q in self._queues:
            r = client._route_queue(q)
            node = r[0].url if r else ""
            g = at.get(node)
            if g is None:
                g = at[node] = _FetchGroup(node, [])
                groups.append(g)
            g.queues.append(q)
        if len(groups) > 1 and self.concurrency < SLOTS_PER_GROUP * len(groups):
            return [_FetchGroup("", list(self._queues))]
        return groups

    def _regroup(self, cur: List[_FetchGroup]) -> List[_FetchGroup]:
        """A new grouping of the queues once it differs from cur, or cur once
        the worker drains."""
        while True:
            with self._cond:
                if self._cond.wait_for(lambda: self._draining, REGROUP_EVERY):
                    return cur
            nxt = self._group_queues()
            if not _same_groups(nxt, cur):
                return nxt

    def _poll(self, g: _FetchGroup, shared: bool, done: threading.Event, cancel: Cancel) -> None:
        """Group g's poller: leases as many jobs as it holds free slots
        (shared with other groups: starting from one, twice as many after
        each full answer, as many as came after a short one; alone: every
        free slot) and hands each to a slot, until the drain or done (its
        grouping was replaced: a fetch under way is still answered and its
        jobs run, so no claimed job is left behind)."""
        c = self._cond
        want = 1 if shared else self.concurrency
        while True:
            with c:
                g.waiting += 1
                while self._slots_used >= self.concurrency and not self._draining and not done.is_set():
                    c.wait()
                g.waiting -= 1
                if self._draining or done.is_set():
                    return
                free = min(want, self.concurrency - self._slots_used)
                self._slots_used += free  # lease only as many jobs as there are free slots
            jobs: List[FetchedJob] = []
            try:
                # A drain closes it: the server hands back what it claimed for it.
                jobs = self.client.fetch(
                    g.queues,
                    worker_id=self.id,
                    hostname=self.hostname,
                    timeout=self.fetch_timeout,
                    count=free,
                    cancel=cancel,
                )
            except Exception as err:
                if not self._draining:
                    self._error(err)
                    with c:
                        c.wait_for(lambda: self._draining or done.is_set(), 0.5)  # the server is away: try again shortly
            with c:
                self._slots_used -= free - len(jobs)
                if len(jobs) < free:
                    c.notify_all()  # slots left over: another group's poller may take them
                draining = self._draining
            if draining:
                self._hand_back(jobs)
                with c:
                    self._slots_used -= len(jobs)
                    c.notify_all()
                return
            if shared:
                want = min(2 * free, self.concurrency) if len(jobs) == free else max(len(jobs), 1)
            # Every job of the answer counts as running before a slot runs
            # one: a handler that returns at once must not find the worker
            # idle and send its ack alone (see _ack).
            ctxs = self._start(jobs, g)
            with c:
                g.chains += len(ctxs)
            for ctx in ctxs:
                self._jobs.put(ctx)
            if done.is_set():
                return

    def _keep(self, g: Optional[_FetchGroup], n: int) -> int:
        """How many of n slots that just finished a job of group g go on
        fetching from it: all of them unless another group's poller waits for
        a slot while g holds more than its share (the slots over all the
        groups that hold or want some); those beyond the share are given
        back (they ack without a fetch, and their slots are free)."""
        with self._cond:
            groups = self._groups
            if len(groups) < 2:
                return n
            hungry, active = False, 0
            for o in groups:
                if o.waiting > 0 or o.chains > 0:
                    active += 1
                if o is not g and o.waiting > 0:
                    hungry = True
            if not hungry:
                return n
            share = max(self.concurrency // max(active, 1), 1)
            excess = (g.chains if g is not None else 0) - share
            return max(min(n, n - excess), 0)

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
            g = ctx._group  # the chain's: every job it runs is of this group
            try:
                self._run_slot(ctx)
            except Exception as err:  # a bug here must not kill the slot
                self._error(err)
            finally:
                with self._cond:
                    self._slots_used -= 1
                    if g is not None:
                        g.chains -= 1
                    self._cond.notify_all()

    def _run_slot(self, ctx: Optional[JobContext]) -> None:
        """Runs a slot's jobs: ctx, then the ones its acks bring. Each ack
        (sent with the acks of other slots that finish at about the same
        time) fetches the slot's next job and, after a handler that took at
        most ``prefetch_under``, one more that the slot holds while it runs
        the next: the slot starts it as soon as that handler returns, while
        its ack is in flight. A slot has at most one ack in flight; it ends
        when it has no job left to run (its poller fetches for it again)."""
        ready: List[JobContext] = []  # claimed for the slot, not started
        answer: Optional[_PendingAck] = None  # the slot's ack in flight
        while True:
            if ctx is not None:
                if ready or answer is not None:
                    # Held jobs wait for this handler for at most
                    # 4×prefetch_under: a slower one has them given back
                    # (unclaimed) for any worker to run (_hold_loop).
                    hold = _Hold(ready, answer, time.monotonic() + 4 * self.prefetch_under)
                    self._holds[hold] = None
                    item, took = self._handle(ctx)
                    if self._holds.pop(hold, _TAKEN) is _TAKEN:
                        hold.done.wait()  # type: ignore[union-attr]
                        ready, answer = [], None
                else:
                    item, took = self._handle(ctx)
                if item is not None:
                    if answer is not None:
                        ready += answer.wait()
                        answer = None
                    want = 0 if ready else 1  # the next job
                    if len(ready) <= 1 and 0 <= self.prefetch_under and took <= self.prefetch_under:
                        want += 1  # and one to hold
                    p = self._ack(item, ctx._group, want, not ready)
                    if ready:
                        answer = p
                    else:
                        ready = p.wait()
            ctx = None
            while ctx is None and ready:
                nxt = ready.pop(0)
                if self._startable(nxt):
                    ctx = nxt
            if ctx is None:
                if answer is None:
                    return
                ready, answer = answer.wait(), None

    def _hold_loop(self) -> None:
        """Gives back the jobs of slots whose handler ran past their hold's
        deadline, checking every quarter of the limit until the worker stops."""
        every = max(self.prefetch_under, 0.04)
        while not self._stopped.wait(every):
            now = time.monotonic()
            due: List[_Hold] = []
            for h in list(self._holds):
                if h.deadline <= now:
                    h.done = threading.Event()  # before the pop: the slot waits for it once the pop is ours
                    if self._holds.pop(h, _TAKEN) is not _TAKEN:
                        due.append(h)
            for h in due:
                try:
                    self._give_back(h.ready + (h.answer.wait() if h.answer is not None else []))
                except Exception as err:  # a bug here must not stop the others' give-backs
                    self._error(err)
                finally:
                    h.done.set()  # type: ignore[union-attr]

    def _give_back(self, ctxs: List[JobContext]) -> None:
        """Takes jobs claimed for a slot out of the running set and hands
        them back to the server unstarted, but for those it moved on from
        (cancelled, lease lost) and those the drain failed already."""
        back: List[FetchedJob] = []
        for ctx in ctxs:
            with self._mu:
                if self._inflight.get(ctx.job["job_id"]) is not ctx:
                    continue  # failed by the drain already
                del self._inflight[ctx.job["job_id"]]
            if not (ctx.cancelled and isinstance(ctx.reason, (JobCancelled, LeaseLost))):
                back.append(ctx.job)
        if back:
            self._hand_back(back)

    def _startable(self, ctx: JobContext) -> bool:
        """Whether a job claimed for a slot may start; one that may not is
        taken out of the running set: dropped when the server moved on from
        it (cancelled, lease lost), given back when the worker drains. A
        held job's lease is kept by the heartbeats like a running one's, so
        it waits at most for the handler before it; one a heartbeat found
        over its budget starts cancelled, as a running one would be."""
        moved = ctx.cancelled and isinstance(ctx.reason, (JobCancelled, LeaseLost))
        if not self._draining and not moved:
            return True
        self._give_back([ctx])
        return False

    def _start(self, jobs: List[FetchedJob], g: Optional[_FetchGroup]) -> List[JobContext]:
        """Registers jobs of group g as running (heartbeats carry them from now on)."""
        ctxs = [JobContext(self, j) for j in jobs]
        for ctx in ctxs:
            ctx._group = g
        with self._mu:
            for ctx in ctxs:
                self._inflight[ctx.job["job_id"]] = ctx
        return ctxs

    def _handle(self, ctx: JobContext) -> Tuple[Optional[AckItem], float]:
        """Runs a started job and reports a failure; answers the ack to send
        (None: nothing to ack) and how long the handler took, in seconds.
        From the handler's end the job counts as acking until its ack is
        answered (_acked)."""
        job = ctx.job
        jid = job["job_id"]
        with self._mu:
            if self._inflight.get(jid) is not ctx:
                return None, 0.0  # failed or given back by the drain before it ran
            ctx._started = True
        h = self._handlers.get(job["queue"])
        failure: Optional[BaseException] = None
        result: Any = None
        start = time.monotonic()
        try:
            if h is None:
                raise LookupError("no handler for queue %s" % job["queue"])
            result = h(job, ctx)
        except Exception as err:
            failure = err
        took = time.monotonic() - start
        with self._mu:
            if self._inflight.get(jid) is not ctx:
                return None, took  # failed by the drain already
            del self._inflight[jid]
            hb_round = self._hb_round  # a heartbeat in flight may carry this job's usage
        with self._cond:
            self._acking += 1
        item: Optional[AckItem] = None
        try:
            if ctx.cancelled and isinstance(ctx.reason, (JobCancelled, LeaseLost)):
                return None, took  # the server has moved on: nothing to report
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
                return None, took
            item = {"job_id": jid, "worker_id": self.id, "attempt": job["attempt"]}
            if result is not None:
                item["result"] = result
            if usage is not None:
                item["usage"] = usage
            if ctx._exit:
                item["step_status"] = "exit"
            return item, took
        finally:
            if item is None:
                self._acked(1)

    def _acked(self, n: int) -> None:
        with self._cond:
            self._acking -= n
            if self._acking == 0:
                self._cond.notify_all()

    # ---- the completer: acks of slots that finish together share a request

    def _ack(self, item: AckItem, g: Optional[_FetchGroup], want: int, wait: bool) -> _PendingAck:
        """Queues the ack of a slot of group g, whose fetch asks for want jobs
        for the slot; answers it (its wait() answers those jobs).

        At most MAX_ACK_REQUESTS ack requests are out at once, each carrying
        every ack of one group waiting when it goes (up to MAX_ACK_BATCH):
        while fewer are out, the ack goes at once, sent by its slot's thread
        when the slot waits for it anyway (wait), else by one of the
        worker's sender threads; otherwise it waits for a request to end,
        and the batches grow under load."""
        p = _PendingAck(item, g, want)
        with self._mu:
            self._acks.append(p)
            start = self._ack_requests < MAX_ACK_REQUESTS
            if start:
                self._ack_requests += 1
        if start:
            if wait:
                self._sender(g, once=True)
            else:
                self._senders.put(g)
        return p

    def _sender_loop(self) -> None:
        while True:
            g = self._senders.get()
            if g is _STOP:
                return
            try:
                self._sender(g, once=False)
            except Exception as err:  # a bug here must not kill the sender
                self._error(err)

    def _sender(self, g: Any, once: bool) -> None:
        """Holds one of the ack requests: sends the waiting acks of group g
        (first letting others join for ACK_WINDOW while handlers still run),
        then those of the first waiting ack's group, until none waits. once
        (a slot's thread, whose next job waits for it): after the first
        request it hands the sending on to a sender thread."""
        if g is not _ANY and self._inflight and not self._draining:
            time.sleep(ACK_WINDOW)  # handlers still run: let their acks join
        while True:
            with self._mu:
                batch = self._take_acks(g, MAX_ACK_BATCH) if g is not _ANY else []
                if not batch and self._acks:
                    batch = self._take_acks(self._acks[0].group, MAX_ACK_BATCH)
                if not batch:
                    self._ack_requests -= 1
                    return
            self._send(batch)
            g = _ANY
            if once:
                with self._mu:
                    if not self._acks:
                        self._ack_requests -= 1
                        return
                self._senders.put(_ANY)  # the slot's next job waits for this thread
                return

    def _take_acks(self, g: Optional[_FetchGroup], n: int) -> List[_PendingAck]:
        """Takes up to n of the waiting acks of group g, in order (under _mu)."""
        mine: List[_PendingAck] = []
        rest: List[_PendingAck] = []
        for a in self._acks:
            (mine if a.group is g and len(mine) < n else rest).append(a)
        self._acks = rest
        return mine

    def _send(self, batch: List[_PendingAck]) -> None:
        """Acks a batch of one group's slots in one request and hands each
        slot its jobs: the first keep of them (_keep) fetch what they want
        from the group's queues, the others are given back."""
        g = batch[0].group
        got: List[List[JobContext]] = [[] for _ in batch]
        try:
            keep = self._keep(g, len(batch))
            want = sum(b.want for b in batch[:keep])
            items = [b.item for b in batch]
            jobs: List[FetchedJob] = []
            try:
                jobs = self._ack_one(items[0], g, want) if len(items) == 1 else self._ack_many(items, g, want)
            except Exception as err:
                self._error(err)
            if self._draining and jobs:
                self._hand_back(jobs)  # claimed as the worker began to drain
                jobs = []
            if len(jobs) > want:
                self._hand_back(jobs[want:])  # more than asked for
                jobs = jobs[:want]
            # All running before any slot has its job (as a poller's fetch
            # does); each slot's next job first, then the ones to hold.
            ctxs = self._start(jobs, g)
            for rnd in range(2):
                for i, b in enumerate(batch[:keep]):
                    if ctxs and b.want > rnd:
                        got[i].append(ctxs.pop(0))
        finally:
            for b, jcs in zip(batch, got):
                b.next = jcs
                b.lock.release()
            self._acked(len(batch))

    def _ack_one(self, a: AckItem, g: Optional[_FetchGroup], want: int) -> List[FetchedJob]:
        """Acks a lone job of group g, with a fetch of want jobs from the
        group's queues (none when want is 0, the worker drains or the server
        refuses the field)."""
        kw = {k: v for k, v in a.items() if k != "job_id"}
        if want == 0 or self._draining or self._plain_acks:
            self.client.ack(a["job_id"], **kw)
            return []
        try:
            return self.client.ack_and_fetch(a["job_id"], self._fetch_body(g, want, 0), **kw).get("jobs") or []
        except CorvoError as err:
            if err.status != 400:
                raise
            self._plain_acks = True  # a server without ack-and-fetch refused the field, and acked nothing
            self.client.ack(a["job_id"], **kw)
            return []

    def _ack_many(self, acks: List[AckItem], g: Optional[_FetchGroup], want: int) -> List[FetchedJob]:
        """Acks many jobs of group g in one request, with a fetch of want jobs
        from the group's queues (none: a plain batch)."""
        out = None
        if want > 0 and not self._draining and not self._plain_batch:
            try:
                out = self.client.ack_batch_and_fetch(acks, self._fetch_body(g, want, 0))
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
        """Gives back jobs the worker claimed but will not run: pending again
        at once, their attempts not counted (unclaim). A server without the
        endpoint (404) has them failed with ``worker_shutdown`` instead, which
        it retries as any failure."""
        for j in jobs:
            try:
                try:
                    self.client.unclaim(j["job_id"], self.id, j["attempt"])
                except NotFoundError:
                    self.client.fail(j["job_id"], "worker_shutdown", worker_id=self.id, attempt=j["attempt"])
            except Exception as err:
                self._error(err)

    def _fail_remaining(self) -> None:
        """Fails the jobs still running when the grace period ends, with their
        checkpoints, and sets their cancel events; gives back the ones slots
        held and never started (their attempts not counted, as at the
        drain's start)."""
        with self._mu:
            left = [ctx for ctx in self._inflight.values() if ctx._started]
            unstarted = [ctx.job for ctx in self._inflight.values() if not ctx._started]
            self._inflight.clear()
        if unstarted:
            self._hand_back(unstarted)
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
