"""The client: one method for every endpoint of docs/api.md."""

from __future__ import annotations

import datetime as _dt
import http.client
import json
import socket
import ssl
import threading
import time
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union
from urllib.parse import quote, urlencode

from ._http import Answer, Base, Cancel, Cancelled, Stream, Transport, dial_failed, sse_frames
from .errors import ConflictError, CorvoError
from .placement import (
    DOWN_FOR,
    FORWARDED_HEADER,
    PLACEMENT_REFRESH,
    PLACEMENT_TIMEOUT,
    plan_placement,
    shard_for_queue,
    shard_of_job_id,
    stored_queue,
)
from .types import (
    AckBatchResult,
    AckFetched,
    AckItem,
    BatchEnqueued,
    Budget,
    BulkAnswer,
    BulkOperation,
    Chain,
    Enqueued,
    EnqueueRequest,
    Event,
    FailResult,
    UnclaimResult,
    FetchedJob,
    FetchRequest,
    HeartbeatAnswer,
    HeartbeatJob,
    Job,
    Priority,
    Routing,
    Schedule,
    SearchFilter,
    SearchPage,
    Usage,
)

__all__ = ["Client", "EventStream", "Cancel", "Cancelled"]

# Coalescing bounds, as the Go SDK's (sdk/go/coalesce.go).
MAX_ENQUEUE_REQUESTS = 2
MAX_ENQUEUE_BATCH = 1000
MAX_ENQUEUE_BATCH_BYTES = 1 << 20

# Requests wait this long for an answer (a fetch: its long-poll more).
DEFAULT_TIMEOUT = 60.0

# The answer header of a forwarded request, as the transport reads it (lower case).
_FORWARDED = FORWARDED_HEADER.lower()

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
_loads = json.loads


def _enc(s: str) -> str:
    return quote(s, safe="")


def _query(params: Dict[str, Any]) -> str:
    q = []
    for k, v in params.items():
        if v is None or v == "":
            continue
        if isinstance(v, bool):
            v = "true" if v else "false"
        if isinstance(v, (list, tuple)):
            for x in v:
                q.append((k, str(x)))
        else:
            q.append((k, str(v)))
    return "?" + urlencode(q) if q else ""


def _compact(d: Dict[str, Any]) -> Dict[str, Any]:
    """The dict without its None values (absent on the wire)."""
    return {k: v for k, v in d.items() if v is not None}


def rfc3339(t: Union[str, _dt.datetime]) -> str:
    """A timestamp as the server takes it (a naive datetime is UTC)."""
    if isinstance(t, str):
        return t
    if t.tzinfo is None:
        t = t.replace(tzinfo=_dt.timezone.utc)
    t = t.astimezone(_dt.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (t.microsecond // 1000)


def _retry_after(h: Optional[str]) -> float:
    if not h:
        return 0.0
    try:
        s = float(h)
    except ValueError:
        return 0.0
    return s if s > 0 else 0.0


def _coalescable(job: Dict[str, Any]) -> bool:
    """A job whose lone enqueue a batch answer fully replaces (its status is "pending")."""
    return job.get("scheduled_at") is None and not job.get("depends_on") and not job.get("unique_key")


class _Pending:
    """An enqueue call waiting for its answer. Its lock is taken from the
    start: the waiting caller blocks on it; it is released once, either with
    the answer (settle) or to make the caller the next sender (lead)."""

    __slots__ = ("queue", "body", "lock", "batch", "out", "err")

    def __init__(self, queue: str, body: bytes):
        self.queue = queue
        self.body = body
        self.lock = threading.Lock()
        self.lock.acquire()
        self.batch: Optional[List["_Pending"]] = None  # set when made the next sender: what to send
        self.out: Optional[Enqueued] = None
        self.err: Optional[BaseException] = None

    def settle(self, out: Optional[Enqueued] = None, err: Optional[BaseException] = None) -> None:
        self.out, self.err = out, err
        self.lock.release()


class _Routing:
    """The client's reading of the placement: its namespace, and for each
    shard the nodes hosting it that are up, leader first."""

    __slots__ = ("ns", "hosts")

    def __init__(self, ns: str, hosts: List[List[Base]]):
        self.ns = ns
        self.hosts = hosts


def _sleep(seconds: float, cancel: Optional[Cancel]) -> None:
    """Sleeps, or raises Cancelled as soon as cancel is."""
    if cancel is None:
        time.sleep(seconds)
    elif cancel._event.wait(seconds):
        raise Cancelled("corvo: cancelled")


class EventStream:
    """The event stream (``GET /api/v1/events``): an iterator of :class:`corvo.types.Event`.

    ``{"id", "type": "job", "job": {...}}`` for a job event, ``{"id", "type":
    "reset", "reason"}`` when events were lost (refetch state). Keep the last
    ``id`` (also :attr:`last_event_id`) and pass it as ``last_event_id`` to
    :meth:`Client.events` to resume exactly after it. ``close()`` (any thread)
    or leaving the ``with`` block ends it.
    """

    def __init__(self, stream: Stream):
        self._stream = stream
        self._frames = sse_frames(stream)
        self.last_event_id: Optional[str] = None

    def __iter__(self) -> "EventStream":
        return self

    def __next__(self) -> Event:
        for fid, event, data in self._frames:
            if event == "job":
                self.last_event_id = fid
                return {"id": fid, "type": "job", "job": _loads(data)}
            if event == "reset":
                self.last_event_id = fid
                return {"id": fid, "type": "reset", "reason": _loads(data).get("reason", "")}
        raise StopIteration

    def close(self) -> None:
        """Closes the stream (safe from another thread: a blocked read returns)."""
        self._stream.close()

    def __enter__(self) -> "EventStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Client:
    """A client of a Corvo server, of a load balancer in front of a cluster,
    or of several nodes of a cluster: when a node cannot be reached (or
    answers 503 ``shutting_down``) the client moves to the next URL.

    Safe to share between threads: connections are kept alive and reused.

    >>> corvo = Client("http://localhost:8080")
    >>> corvo.enqueue("emails.send", {"to": "a@b.c"})["job_id"]  # doctest: +SKIP

    Args:
        urls: one base URL, several comma-separated, or a list.
        api_key: an API key (``corvo_…``), sent as ``Authorization: Bearer``
            (a bearer token from single sign-on works the same way).
        namespace: the namespace every call acts in (``X-Corvo-Namespace``).
        max_retries: how often a request answered 429 or 503, or one that
            could not reach a server, is tried again (default 5). 429/503
            wait the answer's Retry-After; a node that cannot be reached
            moves the client to the next URL. Also a writable attribute.
        coalesce_enqueues: gather concurrent :meth:`enqueue` calls into
            ``POST /api/v1/enqueue/batch`` (default True).
        cluster_secret: the cluster secret, for :meth:`remove_node`.
        timeout: seconds a request may wait for its answer (default 60; a
            fetch adds its long-poll).
        ssl_context: for ``https://`` URLs (default: the system's trust store;
            ``ssl.create_default_context(cafile=...)`` for a private CA).
        placement: route each request that names one queue or one job
            straight to a node hosting its shard, leader first (default True;
            see :mod:`corvo.placement`). False: every request goes to the
            current URL, which forwards what it does not host. Needs no
            setting for a single node, a load balancer that hides the nodes,
            or a key without ``cluster:read``: the client finds out and stops
            routing.
    """

    def __init__(
        self,
        urls: Union[str, Sequence[str]],
        *,
        api_key: Optional[str] = None,
        namespace: Optional[str] = None,
        max_retries: int = 5,
        coalesce_enqueues: bool = True,
        cluster_secret: Optional[str] = None,
        timeout: float = DEFAULT_TIMEOUT,
        ssl_context: Optional[ssl.SSLContext] = None,
        placement: bool = True,
    ):
        raw = urls.split(",") if isinstance(urls, str) else list(urls)
        nodes = [u.strip().rstrip("/") for u in raw if u.strip()]
        if not nodes:
            raise ValueError("corvo: no server URL")
        self._nodes = [Base(u) for u in nodes]
        self._cur = 0
        self.max_retries = max_retries
        self.timeout = timeout
        self._api_key = api_key
        self._namespace = namespace
        self._cluster_secret = cluster_secret
        self._coalesce = coalesce_enqueues
        self._transport = Transport(ssl_context)
        self._headers: Dict[str, str] = {}
        if api_key:
            self._headers["Authorization"] = "Bearer " + api_key
        if namespace:
            self._headers["X-Corvo-Namespace"] = namespace
        self._json_headers = dict(self._headers, **{"Content-Type": "application/json"})
        self._qlock = threading.Lock()
        self._senders = 0
        self._waiting: List[_Pending] = []
        # Placement routing (placement.py).
        self._place_off = not placement
        self._place_started = False
        self._place: Optional[_Routing] = None
        self._place_lock = threading.Lock()
        self._place_loading = False
        self._place_last: Optional[float] = None  # when the last read began (monotonic)
        self._down: Dict[str, float] = {}  # node URL → until when it is left out (monotonic)
        self._bases: Dict[str, Base] = {}

    # ---- plumbing --------------------------------------------------------

    @property
    def urls(self) -> List[str]:
        """The base URLs the client uses, the current one first."""
        n = len(self._nodes)
        at = self._cur % n
        return [b.url for b in self._nodes[at:] + self._nodes[:at]]

    def close(self) -> None:
        """Closes the kept-alive connections (the client stays usable)."""
        self._transport.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _base(self) -> "tuple[Base, int]":
        at = self._cur
        nodes = self._nodes
        return nodes[at % len(nodes)], at

    def _failover(self, frm: int) -> None:
        """Moves to the next node unless another request already did."""
        if self._cur == frm:
            self._cur = frm + 1

    def _request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: Optional[bytes] = None,
        retries: Optional[int] = None,
        timeout: Optional[float] = None,
        headers: Optional[Dict[str, str]] = None,
        route: Optional[List[Base]] = None,
        cancel: Optional[Cancel] = None,
    ) -> Answer:
        """Sends a request to the first of ``route``'s nodes that answers (a
        placement route, see :meth:`_routed`), else to the current node;
        retries 429 and 503 answers after their Retry-After, and requests
        that reached no server on the next node. Raises :class:`CorvoError`
        for an error answer; ``cancel`` ends it (:class:`Cancelled`)."""
        payload = raw if raw is not None else (None if body is None else _dumps(body).encode())
        if retries is None:
            retries = self.max_retries
        if method in ("POST", "PUT", "PATCH") or payload is not None:
            h = self._json_headers
        else:
            h = self._headers
        if headers:
            h = dict(h, **headers)
        t = self.timeout if timeout is None else timeout
        if route:
            routed = self._routed(route, method, path, payload, h, t, cancel)
            if routed is not None:
                return routed
        attempt = 0
        while True:
            base, at = self._base()
            try:
                a = self._transport.request(base, method, path, payload, h, t, cancel)
            except (OSError, http.client.HTTPException):
                # Connection refused or reset: another node may answer.
                self._failover(at)
                if attempt >= retries:
                    raise
                n = len(self._nodes)
                _sleep(0 if n > 1 and attempt < n else 0.05 * 2 ** min(attempt, 5), cancel)
                attempt += 1
                continue
            if self._place is not None and _FORWARDED in a.headers:
                self._refresh_placement()  # sent to a node that does not host it
            if a.status < 400:
                return a
            err = CorvoError.from_answer(a.status, a.body.decode("utf-8", "replace"), _retry_after(a.headers.get("retry-after")))
            # A spent budget stays spent until UTC midnight: not retried.
            if a.status not in (429, 503) or err.code == "budget_exceeded" or attempt >= retries:
                raise err
            wait = err.retry_after or 0.05 * 2 ** min(attempt, 5)
            if err.code == "shutting_down":
                self._failover(at)  # this node is stopping; another one answers at once
                if len(self._nodes) > 1:
                    wait = 0
            _sleep(wait, cancel)
            attempt += 1

    def _routed(
        self,
        route: List[Base],
        method: str,
        path: str,
        payload: Optional[bytes],
        h: Dict[str, str],
        t: Optional[float],
        cancel: Optional[Cancel],
    ) -> Optional[Answer]:
        """Sends a request to the first of route's nodes that answers; None
        when none did, and the request goes the usual way (the node list, its
        retries and failover). A node that cannot be reached is left out for
        a while and the next one tried; a connection that fails once the
        request was sent leaves the node out too, and the request goes the
        usual way (which retries it, as it would have). Those, a 503 or an
        answer saying it was forwarded make the client read the placement
        again."""
        for node in route:
            try:
                a = self._transport.request(node, method, path, payload, h, t, cancel)
            except (OSError, http.client.HTTPException) as err:
                if not dial_failed(err) and isinstance(err, socket.timeout):
                    raise  # slow, not gone: as the usual way would time out
                self._mark_down(node)
                self._refresh_placement()
                if dial_failed(err):
                    continue
                return None  # reset or closed: the usual way retries it
            if _FORWARDED in a.headers:
                self._refresh_placement()
            if a.status < 400:
                return a
            if a.status == 503:
                self._refresh_placement()
                return None
            if a.status == 429:
                return None  # the usual way waits its Retry-After
            raise CorvoError.from_answer(a.status, a.body.decode("utf-8", "replace"), _retry_after(a.headers.get("retry-after")))
        return None

    # ---- placement (placement.py) -----------------------------------------

    def _placement(self) -> Optional[_Routing]:
        """The current placement (None: route nothing); the first call starts reading it."""
        if self._place_off:
            return None
        if not self._place_started:
            # The call that starts the read routes nothing: whether the read
            # is done before this request leaves must not decide where it goes.
            self._place_started = True
            self._refresh_placement()
            return None
        return self._place

    def _route_shard(self, sh: int) -> Optional[List[Base]]:
        """Where a request for shard sh goes: its nodes, leader first, less
        those recently unreachable (None: the usual way)."""
        p = self._placement()
        if p is None or not 0 <= sh < len(p.hosts):
            return None
        hosts = p.hosts[sh]
        down = self._down
        if not down:
            return hosts
        now = time.monotonic()
        return [b for b in hosts if down.get(b.url, 0.0) <= now]

    def _route_queue(self, queue: str) -> Optional[List[Base]]:
        """_route_shard for the queue's shard."""
        p = self._placement()
        if p is None:
            return None
        return self._route_shard(shard_for_queue(stored_queue(p.ns, queue), len(p.hosts)))

    def _route_job(self, job_id: str) -> Optional[List[Base]]:
        """_route_shard for the shard the job ID carries."""
        return self._route_shard(shard_of_job_id(job_id))

    def _route_most(self, keys: Iterable[str], jobs: bool) -> Optional[List[Base]]:
        """The leader of the shard most of keys (queues, or job IDs when jobs)
        map to: a request spanning shards goes to the node answering most of
        it itself."""
        if self._placement() is None:
            return None
        votes: Dict[str, int] = {}
        best: Optional[Base] = None
        best_n = 0
        for k in keys:
            r = self._route_job(k) if jobs else self._route_queue(k)
            if not r:
                continue
            n = votes.get(r[0].url, 0) + 1
            votes[r[0].url] = n
            if n > best_n:
                best, best_n = r[0], n
        return None if best is None else [best]

    def _mark_down(self, node: Base) -> None:
        self._down[node.url] = time.monotonic() + DOWN_FOR

    def _refresh_placement(self) -> None:
        """Reads the placement again in a background thread, unless a read is
        under way or one began less than PLACEMENT_REFRESH seconds ago."""
        if self._place_off:
            return
        with self._place_lock:
            now = time.monotonic()
            if self._place_loading or (self._place_last is not None and now - self._place_last < PLACEMENT_REFRESH):
                return
            self._place_loading = True
            self._place_last = now
        threading.Thread(target=self._load_placement_async, name="corvo-placement", daemon=True).start()

    def _load_placement_async(self, read: Optional[threading.Event] = None) -> None:
        try:
            self._load_placement(None)
        except Exception:
            pass  # failing, the old placement stays
        finally:
            with self._place_lock:
                self._place_loading = False
            if read is not None:
                read.set()

    def _placement_now(self, timeout: float = PLACEMENT_TIMEOUT) -> Optional[_Routing]:
        """The placement, read at once if no read has been made yet, waiting
        for it at most timeout seconds: a worker starting on a cluster groups
        its queues by node from its first fetch (as the Go SDK's
        placementNow). None: nothing to route (yet: failing or late, the read
        is made again later, as any other)."""
        if self._place_off:
            return None
        if self._place is not None or self._place_started:
            return self._placement()
        self._place_started = True
        with self._place_lock:
            if self._place_loading:
                return self._place
            self._place_loading = True
            self._place_last = time.monotonic()
        read = threading.Event()
        threading.Thread(target=self._load_placement_async, args=(read,), name="corvo-placement", daemon=True).start()
        read.wait(timeout)
        return self._place

    def _load_placement(self, status: Optional[Dict[str, Any]]) -> None:
        """Reads the placement (status: a cluster status read already) and makes it the client's."""
        if status is None:
            try:
                status = self._get_direct("/api/v1/cluster/status")
            except CorvoError as err:
                if err.status in (401, 403, 404):
                    self._place_off = True  # the cluster cannot tell us: route nothing
                    self._place = None
                raise
        ns = self._namespace or ""
        if not ns and self._api_key:
            ns = self._get_direct("/api/v1/auth/whoami").get("namespace") or ""  # the key's own
        cur, _ = self._base()
        p = plan_placement(status or {}, "https://" if cur.https else "http://", ns)
        self._place = None if p is None else _Routing(p.ns, [[self._base_of(u) for u in hs] for hs in p.hosts])

    def _get_direct(self, path: str) -> Any:
        """A GET through the node list without waiting out a Retry-After: a
        placement read never waits behind one."""
        n = len(self._nodes)
        for i in range(n):
            try:
                return self._call("GET", path, retries=0, timeout=PLACEMENT_TIMEOUT)
            except (OSError, http.client.HTTPException):
                if i + 1 >= n:
                    raise  # (the failed attempt moved the client to the next node)
        return None

    def _base_of(self, url: str) -> Base:
        b = self._bases.get(url)
        if b is None:
            b = self._bases[url] = Base(url)
        return b

    def _call(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        a = self._request(method, path, body, **kw)
        return _loads(a.body) if a.body else None

    def _stream(self, path: str, headers: Optional[Dict[str, str]] = None, timeout: Optional[float] = None) -> Stream:
        """Opens a streaming GET on its own connection; raises the error of a non-200 answer."""
        base, at = self._base()
        h = dict(self._headers, **(headers or {}))
        conn = self._transport.connect(base, timeout)
        try:
            conn.request("GET", base.prefix + path, None, h)
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException):
            conn.close()
            self._failover(at)  # the caller reconnects, to the next node
            raise
        if resp.status != 200:
            text = resp.read().decode("utf-8", "replace")
            conn.close()
            raise CorvoError.from_answer(resp.status, text, _retry_after(resp.getheader("retry-after")))
        return Stream(conn, resp)

    # ---- producers -------------------------------------------------------

    def enqueue(
        self,
        queue: str,
        payload: Any = None,
        *,
        priority: Optional[Priority] = None,
        max_retries: Optional[int] = None,
        retry_backoff: Optional[str] = None,
        retry_base_delay: Optional[str] = None,
        retry_max_delay: Optional[str] = None,
        lease_duration: Optional[int] = None,
        scheduled_at: Union[str, _dt.datetime, None] = None,
        expire_after: Optional[str] = None,
        tags: Optional[Dict[str, str]] = None,
        unique_key: Optional[str] = None,
        unique_period: Optional[int] = None,
        depends_on: Optional[List[str]] = None,
        chain: Optional[Chain] = None,
        routing: Optional[Routing] = None,
    ) -> Enqueued:
        """Enqueues a job (``POST /api/v1/enqueue``) with any option of docs/api.md.

        Concurrent calls (from several threads) are coalesced: a call made
        while fewer than 2 enqueue requests of this client are in flight goes
        out at once, alone (no added latency); calls made meanwhile are sent
        together as the next ``POST /api/v1/enqueue/batch`` (≤ 1,000 jobs,
        ≤ 1 MiB). Each call still gets its own answer or error; a job the
        batch did not settle is sent again alone. Jobs with ``scheduled_at``,
        ``depends_on`` or ``unique_key`` always go alone.

        Returns ``{"job_id", "status", "unique_existing"}``.
        """
        job = _compact(
            {
                "queue": queue,
                "payload": payload,
                "priority": priority,
                "max_retries": max_retries,
                "retry_backoff": retry_backoff,
                "retry_base_delay": retry_base_delay,
                "retry_max_delay": retry_max_delay,
                "lease_duration": lease_duration,
                "scheduled_at": None if scheduled_at is None else rfc3339(scheduled_at),
                "expire_after": expire_after,
                "tags": tags,
                "unique_key": unique_key,
                "unique_period": unique_period,
                "depends_on": depends_on,
                "chain": chain,
                "routing": routing,
            }
        )
        return self.enqueue_job(job)  # type: ignore[arg-type]

    def enqueue_job(self, job: EnqueueRequest) -> Enqueued:
        """Enqueues a job given as its request body (an :class:`~corvo.types.EnqueueRequest` dict); coalesced as :meth:`enqueue`."""
        body = _dumps(job).encode()
        if not self._coalesce or not _coalescable(job):  # type: ignore[arg-type]
            return self._call("POST", "/api/v1/enqueue", raw=body, route=self._route_queue(job["queue"]))
        p = _Pending(job["queue"], body)
        with self._qlock:
            wait = self._senders >= MAX_ENQUEUE_REQUESTS
            if wait:
                self._waiting.append(p)
            else:
                self._senders += 1  # goes out now, alone
        if wait:
            p.lock.acquire()  # answered, or made the next sender
            if p.batch is None:
                if p.err is not None:
                    raise p.err
                return p.out  # type: ignore[return-value]
        # This call's thread sends its batch (alone when it did not wait),
        # then takes what gathered meanwhile (a request's worth) and hands
        # it to the first of those callers to send: its thread is blocked
        # anyway until that request answers.
        self._send_enqueues(p.batch or [p])
        with self._qlock:
            nxt = self._take_waiting(MAX_ENQUEUE_BATCH, MAX_ENQUEUE_BATCH_BYTES)
            if not nxt:
                self._senders -= 1
        if nxt:
            nxt[0].batch = nxt
            nxt[0].lock.release()
        if p.err is not None:
            raise p.err
        return p.out  # type: ignore[return-value]

    def _take_waiting(self, count: int, size: int) -> List[_Pending]:
        """The waiting calls that fit in count jobs and size bytes. Call with _qlock held."""
        w = self._waiting
        n, used = 0, 0
        while n < len(w) and n < count and (n == 0 or used + len(w[n].body) + 1 <= size):
            used += len(w[n].body) + 1
            n += 1
        batch = w[:n]
        del w[:n]
        return batch

    def _alone(self, p: _Pending) -> None:
        try:
            p.settle(self._call("POST", "/api/v1/enqueue", raw=p.body, route=self._route_queue(p.queue)))
        except BaseException as err:  # handed to the caller
            p.settle(err=err)

    def _alone_all(self, ps: List[_Pending]) -> None:
        if len(ps) == 1:
            self._alone(ps[0])
            return
        threads = [threading.Thread(target=self._alone, args=(p,), daemon=True) for p in ps]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def _send_enqueues(self, batch: List[_Pending]) -> None:
        """Sends coalesced enqueues: with a placement, one batch per node
        hosting their queues' shards (at once, one thread each), so that none
        takes a forwarding hop."""
        if len(batch) == 1 or self._placement() is None:
            self._send_enqueues_to(None, batch)
            return
        groups: Dict[str, Tuple[Optional[List[Base]], List[_Pending]]] = {}
        for p in batch:
            route = self._route_queue(p.queue)
            key = route[0].url if route else ""
            g = groups.get(key)
            if g is None:
                g = groups[key] = (route, [])
            g[1].append(p)
        gs = list(groups.values())
        threads = [threading.Thread(target=self._send_enqueues_to, args=g, daemon=True) for g in gs[1:]]
        for t in threads:
            t.start()
        self._send_enqueues_to(*gs[0])
        for t in threads:
            t.join()

    def _send_enqueues_to(self, route: Optional[List[Base]], batch: List[_Pending]) -> None:
        """Sends jobs to route's first node (None: the current node) as one
        batch (one job: a plain enqueue); whatever the batch does not settle,
        each job settles alone."""
        if len(batch) == 1:
            self._alone(batch[0])
            return
        body = b'{"jobs":[' + b",".join(p.body for p in batch) + b"]}"
        ids: Optional[List[str]] = None
        not_applied: List[int] = []
        try:
            # One attempt: a failed batch is not sent again whole (some of
            # its shards may have committed); its jobs go alone.
            ids = self._call("POST", "/api/v1/enqueue/batch", raw=body, retries=0, route=route)["job_ids"]
        except CorvoError as err:
            # 429/503: a shard did not commit; the answer names what was not applied.
            b = err.body
            if err.status in (429, 503) and isinstance(b, dict) and isinstance(b.get("job_ids"), list):
                if len(b["job_ids"]) == len(batch):
                    ids = b["job_ids"]
                    not_applied = b.get("not_applied") or []
        except (OSError, http.client.HTTPException, ValueError):
            ids = None
        if ids is None or len(ids) != len(batch):
            # A refused batch stored nothing (a validation error): each job
            # alone gets its own answer. A transport error: each retried alone.
            self._alone_all(batch)
            return
        again = set(not_applied)
        retry = []
        for i, p in enumerate(batch):
            if i in again:
                retry.append(p)
            else:
                p.settle({"job_id": ids[i], "status": "pending", "unique_existing": False})
        if retry:
            self._alone_all(retry)

    def enqueue_batch(
        self, jobs: List[EnqueueRequest], *, callback_queue: Optional[str] = None, callback_payload: Any = None
    ) -> BatchEnqueued:
        """Enqueues up to 10,000 jobs in one request (``POST /api/v1/enqueue/batch``).

        With ``callback_queue`` the jobs form a batch: once every one has
        finished, a callback job carrying ``callback_payload`` and the counts
        is enqueued there. Returns ``{"job_ids", "batch_id"}`` in request order.
        """
        body: Dict[str, Any] = {"jobs": [_with_time(j) for j in jobs]}
        if callback_queue is not None or callback_payload is not None:
            body["batch"] = _compact({"callback_queue": callback_queue, "callback_payload": callback_payload})
        return self._call("POST", "/api/v1/enqueue/batch", body, route=self._route_most((j["queue"] for j in jobs), False))

    # ---- workers ---------------------------------------------------------

    def fetch(
        self,
        queues: Sequence[str],
        *,
        worker_id: Optional[str] = None,
        hostname: Optional[str] = None,
        timeout: float = 0,
        count: Optional[int] = None,
        cancel: Optional[Cancel] = None,
    ) -> List[FetchedJob]:
        """Long-polls up to ``timeout`` seconds for up to ``count`` jobs (default 1)
        of ``queues`` (``POST /api/v1/fetch``); an empty list: none came in time.
        The jobs are leased to ``worker_id``.

        ``cancel`` (a :class:`~corvo.Cancel`): its ``cancel()``, from another
        thread, closes the long-poll's connection at once and this call
        raises :class:`~corvo.Cancelled`; the server hands back what it had
        claimed for it (docs/api.md, ``POST /api/v1/fetch``)."""
        queues = list(queues)
        body = _compact({"queues": queues, "worker_id": worker_id, "hostname": hostname, "timeout": timeout or None, "count": count})
        a = self._request(
            "POST", "/api/v1/fetch", body, timeout=self.timeout + (timeout or 0), route=self._route_most(queues, False), cancel=cancel
        )
        if a.status == 204 or not a.body:
            return []
        data = _loads(a.body)
        if count is not None:
            return data["jobs"]
        return [data]

    def ack(
        self,
        job_id: str,
        *,
        result: Any = None,
        step_status: Optional[str] = None,
        worker_id: Optional[str] = None,
        attempt: Optional[int] = None,
        usage: Optional[Usage] = None,
    ) -> None:
        """Completes a job (``POST /api/v1/ack/{id}``) with its ``result``.
        ``worker_id`` and ``attempt`` make the server check the lease
        (:class:`~corvo.ConflictError` when it is lost); ``usage`` is what the
        attempt used beyond its heartbeats."""
        body = _compact({"result": result, "step_status": step_status, "worker_id": worker_id, "attempt": attempt, "usage": usage})
        self._call("POST", "/api/v1/ack/" + _enc(job_id), body, route=self._route_job(job_id))

    def ack_and_fetch(
        self,
        job_id: str,
        fetch: FetchRequest,
        *,
        result: Any = None,
        step_status: Optional[str] = None,
        worker_id: Optional[str] = None,
        attempt: Optional[int] = None,
        usage: Optional[Usage] = None,
    ) -> AckFetched:
        """Completes a job and claims the worker's next jobs in the same request
        (the ack's ``fetch`` extension): ``{"status", "jobs", "fetch_error"?}``.
        A refused ack claims nothing."""
        body = _compact({"result": result, "step_status": step_status, "worker_id": worker_id, "attempt": attempt, "usage": usage})
        body["fetch"] = fetch
        return self._call("POST", "/api/v1/ack/" + _enc(job_id), body, route=self._route_job(job_id))

    def ack_batch(self, acks: List[AckItem]) -> AckBatchResult:
        """Completes many jobs in one request (``POST /api/v1/ack/batch``);
        ``errors`` lists the ones that failed."""
        return self._call("POST", "/api/v1/ack/batch", {"acks": acks}, route=self._route_most((a["job_id"] for a in acks), True))

    def ack_batch_and_fetch(self, acks: List[AckItem], fetch: FetchRequest) -> AckBatchResult:
        """Completes many jobs and claims up to ``fetch["count"]`` next jobs (only if an ack applied)."""
        route = self._route_most((a["job_id"] for a in acks), True)
        return self._call("POST", "/api/v1/ack/batch", {"acks": acks, "fetch": fetch}, route=route)

    def fail(
        self,
        job_id: str,
        error: str,
        *,
        backtrace: Optional[str] = None,
        checkpoint: Any = None,
        worker_id: Optional[str] = None,
        attempt: Optional[int] = None,
        usage: Optional[Usage] = None,
        provider_error: bool = False,
    ) -> FailResult:
        """Reports a failed attempt (``POST /api/v1/fail/{id}``); the server decides
        what follows: ``{"status": "retrying"|"dead"|"cancelled", "next_attempt_at"?, "attempts_remaining"}``.
        ``usage`` is what the attempt used beyond its heartbeats;
        ``provider_error`` says the model's provider failed, not the job (a job
        with routing moves to its next model at once)."""
        body = _compact(
            {
                "error": error,
                "backtrace": backtrace,
                "checkpoint": checkpoint,
                "worker_id": worker_id,
                "attempt": attempt,
                "usage": usage,
                "provider_error": True if provider_error else None,
            }
        )
        return self._call("POST", "/api/v1/fail/" + _enc(job_id), body, route=self._route_job(job_id))

    def unclaim(self, job_id: str, worker_id: str, attempt: int) -> UnclaimResult:
        """Gives back a job the worker claimed and will not run (one it held
        when it began to drain; ``POST /api/v1/unclaim/{id}``): pending again
        at once, the attempt not counted, no error recorded. ``worker_id`` and
        ``attempt`` name the lease. A job that ran and failed is a
        :meth:`fail`, not this."""
        body = {"worker_id": worker_id, "attempt": attempt}
        return self._call("POST", "/api/v1/unclaim/" + _enc(job_id), body, route=self._route_job(job_id))

    def heartbeat(self, worker_id: str, jobs: Dict[str, HeartbeatJob]) -> Dict[str, str]:
        """Extends the leases of the jobs a worker holds and stores their
        progress, checkpoints and usage (``POST /api/v1/heartbeat``); answers
        each job's status: ``ok``, ``cancel``, ``lost`` or ``not_found``."""
        return {k: v["status"] for k, v in self.heartbeat_answers(worker_id, jobs).items()}

    def heartbeat_answers(self, worker_id: str, jobs: Dict[str, HeartbeatJob]) -> Dict[str, HeartbeatAnswer]:
        """:meth:`heartbeat` with each job's whole answer: ``{"status",
        "budget_exceeded"?}`` (the job is past a per-job budget)."""
        body = {"worker_id": worker_id, "jobs": {k: _compact(dict(v)) for k, v in jobs.items()}}
        try:
            answer = self._call("POST", "/api/v1/heartbeat", body, route=self._route_most(jobs, True))
        except ConflictError as err:
            # No job was ok or cancelled: the 409 carries the statuses.
            if not isinstance(err.body, dict) or "jobs" not in err.body:
                raise
            answer = err.body
        return dict(answer.get("jobs") or {})

    # ---- jobs ------------------------------------------------------------

    def job(self, job_id: str) -> Job:
        """Reads a job with its timeline (``GET /api/v1/jobs/{id}``)."""
        return self._call("GET", "/api/v1/jobs/" + _enc(job_id), route=self._route_job(job_id))

    def cancel(self, job_id: str) -> str:
        """Cancels a job: ``"cancelled"``, or ``"cancelling"`` for an active one."""
        return self._call("POST", "/api/v1/jobs/" + _enc(job_id) + "/cancel", route=self._route_job(job_id))["status"]

    def retry(self, job_id: str) -> str:
        """Sends a completed, dead or cancelled job back to pending."""
        return self._call("POST", "/api/v1/jobs/" + _enc(job_id) + "/retry", route=self._route_job(job_id))["status"]

    def move(self, job_id: str, queue: str, *, reset_attempt: bool = False, priority: Optional[Priority] = None) -> Dict[str, Any]:
        """Re-files a job under another queue (a new ID when it lives on another shard)."""
        body = _compact({"queue": queue, "reset_attempt": reset_attempt, "priority": priority})
        return self._call("POST", "/api/v1/jobs/" + _enc(job_id) + "/move", body, route=self._route_job(job_id))

    def delete_job(self, job_id: str) -> None:
        """Deletes a job in any state."""
        self._call("DELETE", "/api/v1/jobs/" + _enc(job_id), route=self._route_job(job_id))

    def approve(self, job_id: str) -> str:
        """Releases a held job (→ pending)."""
        return self._call("POST", "/api/v1/jobs/" + _enc(job_id) + "/approve", route=self._route_job(job_id))["status"]

    def reject(self, job_id: str) -> str:
        """Rejects a held job (→ dead)."""
        return self._call("POST", "/api/v1/jobs/" + _enc(job_id) + "/reject", route=self._route_job(job_id))["status"]

    def dead(self, *, queue: Optional[str] = None, limit: Optional[int] = None, cursor: Optional[str] = None) -> Dict[str, Any]:
        """One page of the dead-letter list, most recently dead first: ``{"jobs", "has_more", "cursor"}``."""
        return self._call("GET", "/api/v1/dead" + _query({"queue": queue, "limit": limit, "cursor": cursor}))

    def batch(self, batch_id: str) -> Dict[str, Any]:
        """Reads a batch's counts (``GET /api/v1/batches/{id}``)."""
        return self._call("GET", "/api/v1/batches/" + _enc(batch_id))

    # ---- search and bulk -------------------------------------------------

    def search(self, **filter: Any) -> SearchPage:
        """One page of a search (``POST /api/v1/jobs/search``); the fields of
        :class:`~corvo.types.SearchFilter` as keywords. Pass the page's
        ``cursor`` back for the next one, or use :meth:`search_pages`."""
        return self._call("POST", "/api/v1/jobs/search", _compact(filter))

    def search_pages(self, **filter: Any) -> Iterator[SearchPage]:
        """Every page of a search, following the cursors (keyset paging: no duplicates, no gaps)."""
        req = _compact(filter)
        while True:
            page = self._call("POST", "/api/v1/jobs/search", req)
            yield page
            if not page.get("has_more") or not page.get("cursor"):
                return
            req = dict(req, cursor=page["cursor"])

    def search_all(self, **filter: Any) -> Iterator[Dict[str, Any]]:
        """Every job a search matches, page after page: ``for hit in client.search_all(queue="q", state=["dead"])``."""
        for page in self.search_pages(**filter):
            yield from page["jobs"]

    def bulk(
        self,
        action: str,
        *,
        job_ids: Optional[List[str]] = None,
        filter: Optional[SearchFilter] = None,
        move_to_queue: Optional[str] = None,
        priority: Optional[Priority] = None,
        async_: bool = False,
        confirm: bool = False,
    ) -> BulkAnswer:
        """Runs a bulk action (``POST /api/v1/jobs/bulk``): ``retry``, ``requeue``,
        ``delete``, ``cancel``, ``move`` or ``change_priority``, on ``job_ids``
        or the jobs a ``filter`` matches. A small one answers
        ``{"result": {...}}``; a large one (over 10,000 jobs, or ``async_``)
        is accepted and runs in the background: ``{"accepted":
        {"bulk_operation_id", ...}}`` (follow it with :meth:`watch_bulk`).
        A filter selecting a whole queue needs ``confirm``."""
        body = _compact(
            {
                "action": action,
                "job_ids": job_ids,
                "filter": filter,
                "move_to_queue": move_to_queue,
                "priority": priority,
                "async": async_ or None,
                "confirm": confirm or None,
            }
        )
        a = self._request("POST", "/api/v1/jobs/bulk", body)
        data = _loads(a.body)
        return {"accepted": data} if a.status == 202 else {"result": data}

    def bulk_status(self, op_id: str) -> BulkOperation:
        """Reads a background bulk operation."""
        return self._call("GET", "/api/v1/bulk/" + _enc(op_id))

    def cancel_bulk(self, op_id: str) -> BulkOperation:
        """Stops a running bulk operation; answers its final record (409 when finished)."""
        return self._call("DELETE", "/api/v1/bulk/" + _enc(op_id))

    def bulk_operations(self, limit: int = 50) -> List[BulkOperation]:
        """This node's recent bulk operations, newest first."""
        return self._call("GET", "/api/v1/bulk" + _query({"limit": limit}))["operations"]

    def watch_bulk(self, op_id: str, on_progress: Optional[Callable[[BulkOperation], None]] = None) -> BulkOperation:
        """Follows a background bulk operation's progress stream
        (``GET /api/v1/bulk/{id}/progress``) to its end; calls ``on_progress``
        with each progress record and answers the final one."""
        stream = self._stream("/api/v1/bulk/" + _enc(op_id) + "/progress", {"Accept": "text/event-stream"}, self.timeout)
        try:
            for _, event, data in sse_frames(stream):
                op = _loads(data)
                if event == "done":
                    return op
                if event == "progress" and on_progress is not None:
                    on_progress(op)
        finally:
            stream.close()
        raise CorvoError(0, "", "the progress stream ended before the operation finished")

    def rebuild_mirror(self) -> str:
        """Asks the node to rebuild its search mirror in the background."""
        return self._call("POST", "/api/v1/admin/rebuild-mirror")["status"]

    # ---- events ----------------------------------------------------------

    def events(
        self,
        *,
        queues: Optional[Sequence[str]] = None,
        types: Optional[Sequence[str]] = None,
        last_event_id: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> EventStream:
        """Opens the event stream (``GET /api/v1/events``), optionally of some
        queues and event types; answers once the server has opened it (events
        from then on are delivered). With ``last_event_id`` it resumes exactly
        after that event. ``timeout``: seconds a read may wait (default: no
        limit; the server sends a keepalive every 15 s).

        >>> with client.events(queues=["emails.send"]) as stream:  # doctest: +SKIP
        ...     for ev in stream:
        ...         print(ev["id"], ev["job"]["type"])
        """
        path = "/api/v1/events" + _query(
            {"queue": ",".join(queues) if queues else None, "type": ",".join(types) if types else None}
        )
        headers = {"Accept": "text/event-stream"}
        if last_event_id:
            headers["Last-Event-ID"] = last_event_id
        return EventStream(self._stream(path, headers, timeout))

    # ---- queues ----------------------------------------------------------

    def queues(self) -> List[Dict[str, Any]]:
        """Every queue with its counts and settings."""
        return self._call("GET", "/api/v1/queues")["queues"]

    def queue_history(
        self,
        queues: Optional[Sequence[str]] = None,
        *,
        since: Optional[str] = None,
        step: Optional[str] = None,
        until: Optional[int] = None,
    ) -> Dict[str, Any]:
        """Queues' counts and rates over time (``GET /api/v1/queues/history``)."""
        return self._call("GET", "/api/v1/queues/history" + _query({"queue": list(queues or []), "since": since, "step": step, "until": until}))

    def pause_queue(self, queue: str) -> Dict[str, Any]:
        """Pauses a queue: fetches skip it."""
        return self._call("POST", "/api/v1/queues/" + _enc(queue) + "/pause", route=self._route_queue(queue))

    def resume_queue(self, queue: str) -> Dict[str, Any]:
        """Resumes a paused queue."""
        return self._call("POST", "/api/v1/queues/" + _enc(queue) + "/resume", route=self._route_queue(queue))

    def clear_queue(self, queue: str) -> Dict[str, Any]:
        """Deletes every pending, scheduled and retrying job of a queue."""
        return self._call("POST", "/api/v1/queues/" + _enc(queue) + "/clear", route=self._route_queue(queue))

    def drain_queue(self, queue: str) -> Dict[str, Any]:
        """Pauses a queue so active jobs finish and no new ones start."""
        return self._call("POST", "/api/v1/queues/" + _enc(queue) + "/drain", route=self._route_queue(queue))

    def set_concurrency(self, queue: str, max: Optional[int]) -> Dict[str, Any]:
        """Caps a queue's active jobs across every worker (None or 0: no cap)."""
        return self._call("POST", "/api/v1/queues/" + _enc(queue) + "/concurrency", {"max": max}, route=self._route_queue(queue))

    def set_throttle(
        self, queue: str, rate: Optional[int], *, period: Optional[str] = None, window_ms: Optional[int] = None
    ) -> Dict[str, Any]:
        """Limits a queue to ``rate`` fetches per ``period`` (or ``window_ms``); ``rate`` None removes the limit."""
        path = "/api/v1/queues/" + _enc(queue) + "/throttle"
        route = self._route_queue(queue)
        if rate is None:
            return self._call("DELETE", path, route=route)
        return self._call("POST", path, _compact({"rate": rate, "period": period, "window_ms": window_ms}), route=route)

    def delete_queue(self, queue: str) -> Dict[str, Any]:
        """Deletes a queue, its settings and every one of its jobs."""
        return self._call("DELETE", "/api/v1/queues/" + _enc(queue) + "?confirm=true", route=self._route_queue(queue))

    # ---- budgets ---------------------------------------------------------

    def budgets(self) -> List[Budget]:
        """The namespace's budgets with the spend of the current UTC day (``GET /api/v1/budgets``)."""
        return self._call("GET", "/api/v1/budgets")["budgets"]

    def set_budget(
        self,
        scope: str,
        *,
        daily_usd: Optional[float] = None,
        per_job_usd: Optional[float] = None,
        on_exceed: Optional[str] = None,
    ) -> Budget:
        """Creates or replaces the budget of a scope (``queue:<name>``,
        ``tag:<key>=<value>`` or ``global``): a daily limit, a per-job one or
        both; ``on_exceed`` ``hold`` (default), ``reject`` or ``alert_only``."""
        body = _compact({"scope": scope, "daily_usd": daily_usd, "per_job_usd": per_job_usd, "on_exceed": on_exceed})
        return self._call("PUT", "/api/v1/budgets", body)

    def delete_budget(self, scope: str) -> None:
        """Removes the budget of a scope, and its spends."""
        self._call("DELETE", "/api/v1/budgets/" + _enc(scope))

    # ---- schedules -------------------------------------------------------

    def schedules(self) -> List[Schedule]:
        """Every cron schedule, by name."""
        return self._call("GET", "/api/v1/schedules")["schedules"]

    def put_schedule(self, schedule: Schedule) -> Schedule:
        """Creates a schedule (no ``id``) or replaces the one with ``id``."""
        answered = ("id", "next_run", "last_run", "created_at", "last_job_id", "paused")
        body = {k: v for k, v in schedule.items() if k not in answered}
        sid = schedule.get("id")
        if sid:
            return self._call("PUT", "/api/v1/schedules/" + _enc(sid), body)
        return self._call("POST", "/api/v1/schedules", body)

    def delete_schedule(self, schedule_id: str) -> None:
        """Deletes a schedule."""
        self._call("DELETE", "/api/v1/schedules/" + _enc(schedule_id))

    def pause_schedule(self, schedule_id: str) -> Schedule:
        """Pauses a schedule: it fires nothing until resumed."""
        return self._call("POST", "/api/v1/schedules/" + _enc(schedule_id) + "/pause")

    def resume_schedule(self, schedule_id: str) -> Schedule:
        """Resumes a schedule from its first run after now."""
        return self._call("POST", "/api/v1/schedules/" + _enc(schedule_id) + "/resume")

    def run_schedule(self, schedule_id: str) -> Dict[str, Any]:
        """Enqueues a run of the schedule now: ``{"job_id", "status", "schedule_id"}``."""
        return self._call("POST", "/api/v1/schedules/" + _enc(schedule_id) + "/run")

    # ---- cluster and operations -----------------------------------------

    def workers(self) -> List[Dict[str, Any]]:
        """Every worker heard from in the last 24 hours."""
        return self._call("GET", "/api/v1/workers")["workers"]

    def cluster_status(self) -> Dict[str, Any]:
        """The cluster's nodes, shards and replicas (``GET /api/v1/cluster/status``)."""
        return self._call("GET", "/api/v1/cluster/status")

    def discover(self) -> List[str]:
        """Asks the cluster for its members and from then on spreads over every
        node that is up, so the client survives the loss of the node it was given.
        It also takes the cluster's placement from the same answer, so that
        routing (the ``placement`` option) starts with the next request."""
        st = self.cluster_status()
        cur, _ = self._base()
        scheme = "https://" if cur.https else "http://"
        nodes = [cur]
        for n in st.get("nodes") or []:
            u = scheme + (n.get("http_address") or "")
            if n.get("http_address") and n.get("status") == "up" and u != cur.url:
                nodes.append(Base(u))
        self._nodes = nodes
        self._cur = 0
        if not self._place_off:
            self._place_started = True
            self._load_placement(st)
        return self.urls

    def remove_node(self, node_id: int) -> None:
        """Takes a node out of the cluster (needs ``cluster_secret``)."""
        h = {"X-Corvo-Cluster-Secret": self._cluster_secret} if self._cluster_secret else None
        self._call("DELETE", "/api/v1/cluster/nodes/%d" % node_id, headers=h)

    def health(self) -> Dict[str, Any]:
        """``GET /healthz``."""
        return self._call("GET", "/healthz")

    def metrics(self) -> str:
        """The Prometheus metrics text."""
        return self._request("GET", "/api/v1/metrics").body.decode("utf-8")

    def audit(self, **filter: Any) -> Dict[str, Any]:
        """One page of the audit log, newest first (``namespace``, ``key_id``,
        ``method``, ``path_prefix``, ``status``, ``since``, ``until``, ``limit``, ``cursor``)."""
        return self._call("GET", "/api/v1/audit" + _query(filter))

    def backup(self, *, namespace: Optional[str] = None, keys: Optional[str] = None) -> Iterator[Dict[str, Any]]:
        """Streams a backup, one record at a time (the header first, the trailer last)."""
        stream = self._stream("/api/v1/backup" + _query({"namespace": namespace, "keys": keys}), None, self.timeout)
        try:
            while True:
                line = stream.readline()
                if not line:
                    return
                line = line.strip()
                if line:
                    yield _loads(line)
        finally:
            stream.close()

    def restore(self, backup: Union[bytes, str, Iterable[Dict[str, Any]]], *, into: Optional[str] = None) -> Dict[str, Any]:
        """Restores a backup (its NDJSON bytes or text, or its records), optionally into namespace ``into``."""
        if isinstance(backup, str):
            raw = backup.encode()
        elif isinstance(backup, (bytes, bytearray)):
            raw = bytes(backup)
        else:
            raw = b"".join(_dumps(r).encode() + b"\n" for r in backup)
        return self._call("POST", "/api/v1/restore" + _query({"into": into}), raw=raw, retries=0)

    # ---- auth ------------------------------------------------------------

    def whoami(self) -> Dict[str, Any]:
        """Who the client's key acts as."""
        return self._call("GET", "/api/v1/auth/whoami")

    def create_key(
        self,
        name: str,
        *,
        namespace: Optional[str] = None,
        role: Optional[str] = None,
        queues: Optional[List[str]] = None,
        expires_at: Union[str, _dt.datetime, None] = None,
        rate_read: Optional[int] = None,
        rate_write: Optional[int] = None,
    ) -> Dict[str, Any]:
        """Creates an API key; the answer holds the key itself (``key``), this once."""
        body = _compact(
            {
                "name": name,
                "namespace": namespace,
                "role": role,
                "queues": queues,
                "expires_at": None if expires_at is None else rfc3339(expires_at),
                "rate_read": rate_read,
                "rate_write": rate_write,
            }
        )
        return self._call("POST", "/api/v1/auth/keys", body)

    def keys(self) -> List[Dict[str, Any]]:
        """Every API key (never the keys themselves)."""
        return self._call("GET", "/api/v1/auth/keys")["keys"]

    def key(self, key_id: str) -> Dict[str, Any]:
        """One API key's record."""
        return self._call("GET", "/api/v1/auth/keys/" + _enc(key_id))

    def update_key(self, key_id: str, **fields: Any) -> Dict[str, Any]:
        """Changes an API key's ``name``, ``role``, ``queues``, ``enabled``, ``expires_at``, ``rate_read`` or ``rate_write``."""
        return self._call("PATCH", "/api/v1/auth/keys/" + _enc(key_id), fields)

    def revoke_key(self, key_id: str) -> None:
        """Revokes an API key everywhere, for good."""
        self._call("DELETE", "/api/v1/auth/keys/" + _enc(key_id))

    def roles(self) -> List[Dict[str, Any]]:
        """The built-in roles, then the custom ones."""
        return self._call("GET", "/api/v1/auth/roles")["roles"]

    def role(self, name: str) -> Dict[str, Any]:
        """One role."""
        return self._call("GET", "/api/v1/auth/roles/" + _enc(name))

    def put_role(self, name: str, permissions: List[str], queues: Optional[List[str]] = None) -> Dict[str, Any]:
        """Creates or replaces a custom role."""
        return self._call("PUT", "/api/v1/auth/roles/" + _enc(name), _compact({"permissions": permissions, "queues": queues}))

    def delete_role(self, name: str) -> None:
        """Deletes a custom role (409 while a key has it)."""
        self._call("DELETE", "/api/v1/auth/roles/" + _enc(name))

    def namespaces(self) -> List[Dict[str, Any]]:
        """Every namespace (admins)."""
        return self._call("GET", "/api/v1/namespaces")["namespaces"]

    def create_namespace(self, name: str, description: Optional[str] = None) -> Dict[str, Any]:
        """Creates a namespace (admins)."""
        return self._call("POST", "/api/v1/namespaces", _compact({"name": name, "description": description}))

    def delete_namespace(self, name: str) -> None:
        """Deletes an empty namespace (admins)."""
        self._call("DELETE", "/api/v1/namespaces/" + _enc(name))


def _with_time(job: Any) -> Any:
    """A job body with its scheduled_at as the server takes it."""
    t = job.get("scheduled_at")
    if isinstance(t, _dt.datetime):
        return dict(job, scheduled_at=rfc3339(t))
    return job
