"""Unit tests of the client and worker runtime against a scripted HTTP
server (http.server): what each request carried and in which order."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import socket
import threading
import time
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List, Optional

from _server import REPO_ROOT, free_addr, until

from corvo import (
    BudgetExceeded,
    Cancel,
    Cancelled,
    Client,
    ConflictError,
    CorvoError,
    ErrorCodes,
    NotFoundError,
    ProviderError,
    TooManyRequestsError,
    UnavailableError,
    Worker,
    WorkerShutdown,
)
from corvo.client import rfc3339


class Req:
    def __init__(self, method: str, path: str, headers: Dict[str, str], body: Any, conn: int):
        self.method, self.path, self.headers, self.body, self.conn = method, path, headers, body, conn


Route = Callable[[Req, int], Optional[Dict[str, Any]]]


class Fake:
    """A server answering with route(req, n) → {"status", "headers", "body", "chunked"} (None: 404)."""

    def __init__(self, route: Route):
        self.seen: List[Req] = []
        self.lock = threading.Lock()
        self.conns = 0
        fake = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                with fake.lock:
                    fake.conns += 1
                    self.conn_id = fake.conns

            def log_message(self, *a: Any) -> None:
                pass

            def handle_one(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                r = Req(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, json.loads(raw) if raw else None, self.conn_id)
                with fake.lock:
                    fake.seen.append(r)
                    k = len(fake.seen)
                a = route(r, k) or {"status": 404, "body": {"error": "no route", "code": "not_found"}}
                data = b"" if a.get("body") is None else json.dumps(a["body"]).encode()
                self.send_response(a["status"])
                self.send_header("Content-Type", "application/json")
                for hk, hv in (a.get("headers") or {}).items():
                    self.send_header(hk, hv)
                if a.get("close"):
                    self.send_header("Connection", "close")
                    self.close_connection = True
                if a.get("chunked"):
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for i in range(0, len(data), 7):
                        part = data[i : i + 7]
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                    self.wfile.write(b"0\r\n\r\n")
                    return
                if a["status"] != 204:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if a["status"] != 204:
                    self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = handle_one

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.srv.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def paths(self) -> List[str]:
        with self.lock:
            return [r.path for r in self.seen]

    def close(self) -> None:
        self.srv.shutdown()
        self.srv.server_close()


def job(jid: str, attempt: int = 1) -> Dict[str, Any]:
    return {
        "job_id": jid,
        "queue": "q",
        "payload": {"id": jid},
        "priority": "normal",
        "attempt": attempt,
        "max_retries": 3,
        "lease_duration": 60,
        "lease_expires_at": None,
        "checkpoint": None,
        "tags": {},
        "created_at": "2026-01-01T00:00:00.000Z",
    }


class Base(unittest.TestCase):
    def fake(self, route: Route) -> Fake:
        f = Fake(route)
        self.addCleanup(f.close)
        return f

    def client(self, urls: Any, **kw: Any) -> Client:
        kw.setdefault("placement", False)  # one scripted server: nothing to route (placement in test_placement.py)
        c = Client(urls, **kw)
        self.addCleanup(c.close)
        return c


class TestClient(Base):
    def test_429_and_503_are_retried_after_retry_after_and_surface_typed_with_retries_off(self) -> None:
        def route(r: Req, n: int) -> Dict[str, Any]:
            if n == 1:
                return {"status": 429, "headers": {"Retry-After": "0.05"}, "body": {"error": "overloaded", "code": "overloaded"}}
            if n == 2:
                return {"status": 503, "headers": {"Retry-After": "0"}, "body": {"error": "no leader", "code": "unavailable"}}
            if n == 3:
                return {"status": 201, "body": {"job_id": "job_0_x", "status": "pending", "unique_existing": False}}
            return {"status": 429, "headers": {"Retry-After": "2"}, "body": {"error": "slow down", "code": "rate_limited"}}

        s = self.fake(route)
        c = self.client(s.url)
        start = time.monotonic()
        self.assertEqual(c.enqueue("q")["job_id"], "job_0_x")
        self.assertEqual(len(s.seen), 3)
        self.assertGreaterEqual(time.monotonic() - start, 0.05, "Retry-After was not honoured")
        c.max_retries = 0
        with self.assertRaises(TooManyRequestsError) as cm:
            c.enqueue("q")
        err = cm.exception
        self.assertIsInstance(err, CorvoError)
        self.assertEqual(err.status, 429)
        self.assertEqual(err.code, ErrorCodes.RATE_LIMITED)
        self.assertEqual(err.retry_after, 2)

    def test_errors_are_typed_by_status_and_carry_code_and_message(self) -> None:
        def route(r: Req, n: int) -> Dict[str, Any]:
            if r.path.startswith("/api/v1/jobs/"):
                return {"status": 404, "body": {"error": "job job_1_x not found", "code": "not_found"}}
            if r.path.startswith("/api/v1/ack/"):
                return {"status": 409, "body": {"error": "lease lost", "code": "conflict"}}
            return {"status": 503, "body": {"error": "stopping", "code": "shutting_down"}}

        s = self.fake(route)
        c = self.client(s.url, max_retries=0)
        with self.assertRaises(NotFoundError) as nf:
            c.job("job_1_x")
        self.assertEqual(nf.exception.code, "not_found")
        self.assertIn("not found", nf.exception.message)
        with self.assertRaises(ConflictError):
            c.ack("job_1_x", worker_id="w", attempt=1)
        with self.assertRaises(UnavailableError) as un:
            c.queues()
        self.assertEqual(un.exception.code, "shutting_down")

    def test_a_stopping_or_unreachable_node_sends_the_client_to_the_next_url(self) -> None:
        stopping = self.fake(lambda r, n: {"status": 503, "headers": {"Retry-After": "5"}, "body": {"error": "stopping", "code": "shutting_down"}})
        live = self.fake(lambda r, n: {"status": 200, "body": {"queues": []}})
        dead = "http://" + free_addr()
        c = self.client([dead, stopping.url, live.url])
        start = time.monotonic()
        self.assertEqual(c.queues(), [])
        self.assertLess(time.monotonic() - start, 5, "waited out the stopping node's Retry-After instead of moving on")
        self.assertEqual(c.urls[0], live.url)
        self.assertEqual(len(stopping.seen), 1)

    def test_connections_are_kept_alive_and_a_closed_idle_one_is_replaced(self) -> None:
        def route(r: Req, n: int) -> Dict[str, Any]:
            # The third answer closes its connection, as an idle timeout would.
            return {"status": 200, "body": {"queues": []}, "close": n == 3}

        s = self.fake(route)
        c = self.client(s.url, max_retries=0)
        for _ in range(5):
            self.assertEqual(c.queues(), [])
        self.assertEqual([r.conn for r in s.seen], [1, 1, 1, 2, 2])
        # A connection the server drops while it sits in the pool: the next
        # request goes out again on a new one, without a retry of the client's.
        idle = c._transport._idle[c._nodes[0].url][0]
        idle.sock.shutdown(socket.SHUT_RDWR)
        self.assertEqual(c.queues(), [])
        self.assertEqual(s.seen[-1].conn, 3)

    def test_a_chunked_answer_is_read_whole(self) -> None:
        s = self.fake(lambda r, n: {"status": 200, "chunked": True, "body": {"queues": [{"name": "a" * 40}]}})
        c = self.client(s.url)
        self.assertEqual(c.queues(), [{"name": "a" * 40}])
        self.assertEqual(c.queues(), [{"name": "a" * 40}])

    def test_every_enqueue_option_is_sent_and_auth_headers_go_with_every_request(self) -> None:
        s = self.fake(lambda r, n: {"status": 201, "body": {"job_id": "job_0_x", "status": "scheduled", "unique_existing": False}})
        c = self.client(s.url, api_key="corvo_k", namespace="acme")
        at = dt.datetime(2026, 2, 12, 9, 0, 0, 123456, tzinfo=dt.timezone.utc)
        chain = {"steps": [{"queue": "q"}, {"queue": "q2", "payload": {"m": 1}}]}
        c.enqueue(
            "q",
            {"to": "a@b.c"},
            priority="high",
            max_retries=5,
            retry_backoff="linear",
            retry_base_delay="2s",
            retry_max_delay="1m",
            lease_duration=30,
            scheduled_at=at,
            expire_after="1h",
            tags={"t": "1"},
            unique_key="u",
            unique_period=60,
            depends_on=["job_1_a"],
            chain=chain,  # type: ignore[arg-type]
        )
        r = s.seen[0]
        self.assertEqual(r.path, "/api/v1/enqueue")
        self.assertEqual(
            r.body,
            {
                "queue": "q",
                "payload": {"to": "a@b.c"},
                "priority": "high",
                "max_retries": 5,
                "retry_backoff": "linear",
                "retry_base_delay": "2s",
                "retry_max_delay": "1m",
                "lease_duration": 30,
                "scheduled_at": "2026-02-12T09:00:00.123Z",
                "expire_after": "1h",
                "tags": {"t": "1"},
                "unique_key": "u",
                "unique_period": 60,
                "depends_on": ["job_1_a"],
                "chain": chain,
            },
        )
        self.assertEqual(r.headers["authorization"], "Bearer corvo_k")
        self.assertEqual(r.headers["x-corvo-namespace"], "acme")
        self.assertEqual(r.headers["content-type"], "application/json")
        c.cancel("job_0_x")
        self.assertEqual(s.seen[1].headers["content-type"], "application/json", "a POST without a body still says JSON")
        self.assertEqual(rfc3339(dt.datetime(2026, 1, 1)), "2026-01-01T00:00:00.000Z", "a naive datetime is UTC")

    def test_enqueue_coalesces_calls_made_while_two_are_in_flight(self) -> None:
        held: List[threading.Event] = []
        hl = threading.Lock()
        n_alone = [0]

        def route(r: Req, n: int) -> Dict[str, Any]:
            if r.path == "/api/v1/enqueue":
                gate = threading.Event()
                with hl:
                    n_alone[0] += 1
                    jid = "job_0_%d" % n_alone[0]
                    held.append(gate)
                gate.wait(10)
                return {"status": 201, "body": {"job_id": jid, "status": "pending", "unique_existing": False}}
            # The batch: the second job was not applied (its shard did not commit).
            ids = ["job_0_b%d" % i for i in range(len(r.body["jobs"]))]
            return {"status": 503, "body": {"error": "no leader", "code": "unavailable", "job_ids": ids, "not_applied": [1]}}

        s = self.fake(route)
        c = self.client(s.url)
        answers: Dict[int, str] = {}

        def call(i: int) -> None:
            answers[i] = c.enqueue("q", i)["job_id"]

        threads = [threading.Thread(target=call, args=(0,))]
        threads[0].start()
        until("the first call, alone", lambda: len(held) == 1)
        threads.append(threading.Thread(target=call, args=(1,)))
        threads[1].start()
        until("the second call, alone", lambda: len(held) == 2)
        for i in (2, 3, 4, 5):
            t = threading.Thread(target=call, args=(i,))
            threads.append(t)
            t.start()
        until("four calls waiting", lambda: len(c._waiting) == 4)
        self.assertEqual(len(s.seen), 2, "calls made while 2 requests are out must wait")
        held[0].set()
        held[1].set()
        until("the batch's unapplied job, alone", lambda: len(held) == 3)
        held[2].set()
        for t in threads:
            t.join(10)
        self.assertEqual([answers[i] for i in range(6)], ["job_0_1", "job_0_2", "job_0_b0", "job_0_3", "job_0_b2", "job_0_b3"])
        self.assertEqual(s.paths(), ["/api/v1/enqueue", "/api/v1/enqueue", "/api/v1/enqueue/batch", "/api/v1/enqueue"])
        self.assertEqual([j["payload"] for j in s.seen[2].body["jobs"]], [2, 3, 4, 5])
        self.assertEqual(s.seen[3].body["payload"], 3)
        # A unique job never joins a batch: its answer says whether it existed.
        t = threading.Thread(target=lambda: c.enqueue("q", unique_key="k"))
        t.start()
        until("the unique call", lambda: len(held) == 4)
        held[3].set()
        t.join(10)
        self.assertEqual(s.seen[-1].path, "/api/v1/enqueue")
        self.assertEqual(c._senders, 0)

    def test_a_cancelled_fetch_raises_cancelled_and_a_later_one_does_not_go_out(self) -> None:
        s = self.fake(lambda r, n: None)
        c = self.client(s.url)
        cancel = Cancel()
        cancel.cancel()
        with self.assertRaises(Cancelled):
            c.fetch(["q"], timeout=30, cancel=cancel)
        self.assertEqual(s.paths(), [], "a cancelled fetch went out")

    def test_search_pages_follow_the_cursor(self) -> None:
        def route(r: Req, n: int) -> Dict[str, Any]:
            cur = r.body.get("cursor")
            if cur is None:
                return {"status": 200, "body": {"jobs": [{"id": "a"}, {"id": "b"}], "has_more": True, "cursor": "c1", "total": 3}}
            return {"status": 200, "body": {"jobs": [{"id": "c"}], "has_more": False, "cursor": None, "total": 3}}

        s = self.fake(route)
        c = self.client(s.url)
        self.assertEqual([h["id"] for h in c.search_all(queue="q", limit=2)], ["a", "b", "c"])
        self.assertEqual([r.body for r in s.seen], [{"queue": "q", "limit": 2}, {"queue": "q", "limit": 2, "cursor": "c1"}])

    def test_error_codes_are_exactly_those_of_the_docs_table(self) -> None:
        with open(os.path.join(REPO_ROOT, "docs/api.md"), encoding="utf-8") as f:
            api = f.read()
        table = api[api.index("## Errors") : api.index("## Requests from browsers")]
        documented = sorted(re.findall(r"^\| [0-9 /]+ \| `([a-z_]+)` \|", table, re.M))
        self.assertGreater(len(documented), 20)
        self.assertEqual(sorted(ErrorCodes.all()), documented)


class TestWorker(Base):
    def test_fetches_as_many_jobs_as_free_slots_and_one_heartbeat_carries_every_running_job(self) -> None:
        fetches: List[Any] = []
        heartbeats: List[Any] = []

        def route(r: Req, n: int) -> Optional[Dict[str, Any]]:
            if r.path == "/api/v1/fetch":
                fetches.append(r.body)
                if len(fetches) == 1:
                    return {"status": 200, "body": {"jobs": [job("a"), job("b")]}}
                time.sleep(0.02)
                return {"status": 204}
            if r.path == "/api/v1/heartbeat":
                heartbeats.append(r.body)
                return {"status": 200, "body": {"jobs": {k: {"status": "ok"} for k in r.body["jobs"]}}}
            if r.path.startswith("/api/v1/ack"):
                return {"status": 200, "body": {"status": "completed", "acked": 2, "errors": [], "jobs": []}}
            return None

        s = self.fake(route)
        w = Worker(self.client(s.url), id="w1", concurrency=3, fetch_timeout=1, heartbeat_interval=0.02, handle_signals=False)
        release = threading.Event()

        def handler(j: Any, ctx: Any) -> Any:
            ctx.progress({"at": j["payload"]["id"]})
            release.wait(10)
            return {"done": j["payload"]["id"]}

        w.register("q", handler)
        t = threading.Thread(target=w.run)
        t.start()
        try:
            until("two fetches and a heartbeat of both jobs", lambda: len(fetches) >= 2 and any(len(h["jobs"]) == 2 for h in heartbeats))
            self.assertEqual(fetches[0]["count"], 3)
            self.assertEqual(fetches[1]["count"], 1, "two slots busy: the next fetch asks for one job")
            self.assertEqual(fetches[0]["worker_id"], "w1")
            hb = next(h for h in heartbeats if len(h["jobs"]) == 2)
            self.assertEqual(hb, {"worker_id": "w1", "jobs": {"a": {"attempt": 1, "progress": {"at": "a"}}, "b": {"attempt": 1, "progress": {"at": "b"}}}})
        finally:
            release.set()
            w.stop()
            t.join(10)
        acked = []
        for r in s.seen:
            if r.path == "/api/v1/ack/batch":
                acked += [a["job_id"] for a in r.body["acks"]]
            elif r.path.startswith("/api/v1/ack/"):
                acked.append(r.path.rsplit("/", 1)[1])
        self.assertEqual(sorted(acked), ["a", "b"])

    def test_the_jobs_of_one_fetch_all_count_as_running_before_the_first_handler_runs(self) -> None:
        # So that a handler which returns at once finds the others still to
        # finish, and its ack waits to share a request with theirs.
        fetches: List[Any] = []

        def route(r: Req, n: int) -> Optional[Dict[str, Any]]:
            if r.path == "/api/v1/fetch":
                fetches.append(r.body)
                if len(fetches) == 1:
                    return {"status": 200, "body": {"jobs": [job("a"), job("b"), job("c")]}}
                time.sleep(0.02)
                return {"status": 204}
            if r.path.startswith("/api/v1/ack"):
                return {"status": 200, "body": {"status": "completed", "acked": 3, "errors": [], "jobs": []}}
            return None

        s = self.fake(route)
        w = Worker(self.client(s.url), id="w1", concurrency=3, fetch_timeout=1, handle_signals=False)
        seen: List[int] = []
        lock = threading.Lock()

        def handler(j: Any, ctx: Any) -> Any:
            with lock:
                seen.append(w.running)
            return None

        w.register("q", handler)
        t = threading.Thread(target=w.run)
        t.start()
        try:
            until("three jobs handled", lambda: len(seen) == 3)
        finally:
            w.stop()
            t.join(10)
        self.assertEqual(seen[0], 3, "the first handler ran before the others counted as running")

    def test_an_ack_carries_the_next_fetch_and_runs_the_job_it_brings_back(self) -> None:
        # After a quick handler the fetch asks for one job more, to hold
        # (prefetch_under); with it off, for the slot's next job only.
        for kw, count in (({}, 2), ({"prefetch_under": -1}, 1)):
            with self.subTest(**kw):
                self.ack_fetches(kw, count)

    def ack_fetches(self, kw: Dict[str, Any], count: int) -> None:
        def route(r: Req, n: int) -> Optional[Dict[str, Any]]:
            if r.path == "/api/v1/fetch":
                if sum(1 for x in s.seen if x.path == "/api/v1/fetch") == 1:
                    return {"status": 200, "body": {"jobs": [job("a")]}}
                time.sleep(0.02)
                return {"status": 204}
            if r.path == "/api/v1/ack/a":
                return {"status": 200, "body": {"status": "completed", "jobs": [job("b")]}}
            if r.path == "/api/v1/ack/b":
                return {"status": 200, "body": {"status": "completed", "jobs": []}}
            return None

        s = self.fake(route)
        w = Worker(self.client(s.url), id="w1", concurrency=1, fetch_timeout=1, handle_signals=False, **kw)
        ran: List[str] = []

        def handler(j: Any, ctx: Any) -> Any:
            ran.append(j["job_id"])
            return {"ok": j["job_id"]}

        w.register("q", handler)
        t = threading.Thread(target=w.run)
        t.start()
        try:
            until("both jobs ran and b was acked", lambda: len(ran) == 2 and "/api/v1/ack/b" in s.paths())
        finally:
            w.stop()
            t.join(10)
        ack_a = next(r for r in s.seen if r.path == "/api/v1/ack/a")
        self.assertEqual(
            ack_a.body,
            {"worker_id": "w1", "attempt": 1, "result": {"ok": "a"}, "fetch": {"queues": ["q"], "worker_id": "w1", "hostname": w.hostname, "timeout": 0, "count": count}},
        )
        self.assertEqual(ran, ["a", "b"])
        paths = s.paths()
        self.assertEqual(paths[: paths.index("/api/v1/ack/a")].count("/api/v1/fetch"), 1, "job b came with the ack, not from a fetch")

    def test_a_raising_handler_fails_its_job_with_the_error_its_traceback_and_its_checkpoint_and_a_checkpoint_carries_the_progress(self) -> None:
        def route(r: Req, n: int) -> Optional[Dict[str, Any]]:
            if r.path == "/api/v1/fetch":
                if sum(1 for x in s.seen if x.path == "/api/v1/fetch") == 1:
                    return {"status": 200, "body": {"jobs": [job("a", 2)]}}
                time.sleep(0.02)
                return {"status": 204}
            if r.path == "/api/v1/heartbeat":
                return {"status": 200, "body": {"jobs": {"a": {"status": "ok"}}}}
            if r.path == "/api/v1/fail/a":
                return {"status": 200, "body": {"status": "retrying", "attempts_remaining": 1}}
            return None

        s = self.fake(route)
        w = Worker(self.client(s.url), id="w1", concurrency=1, fetch_timeout=1, handle_signals=False)

        def handler(j: Any, ctx: Any) -> Any:
            ctx.progress({"current": 5, "total": 10})
            ctx.checkpoint({"offset": 5})
            raise OSError("disk full")

        w.register("q", handler)
        t = threading.Thread(target=w.run)
        t.start()
        try:
            until("the fail", lambda: "/api/v1/fail/a" in s.paths())
        finally:
            w.stop()
            t.join(10)
        hb = next(r for r in s.seen if r.path == "/api/v1/heartbeat")
        self.assertEqual(hb.body, {"worker_id": "w1", "jobs": {"a": {"attempt": 2, "checkpoint": {"offset": 5}, "progress": {"current": 5, "total": 10}}}})
        f = next(r for r in s.seen if r.path == "/api/v1/fail/a").body
        self.assertEqual(f["error"], "disk full")
        self.assertIn("OSError: disk full", f["backtrace"])
        self.assertIn("in handler", f["backtrace"])
        self.assertEqual(f["checkpoint"], {"offset": 5})
        self.assertEqual(f["attempt"], 2)
        self.assertEqual(f["worker_id"], "w1")

    def test_shutdown_grace_is_the_limit_of_a_drain_with_a_long_poll_in_flight_the_job_left_is_failed_with_its_checkpoint(self) -> None:
        release = threading.Event()
        self.addCleanup(release.set)

        def route(r: Req, n: int) -> Optional[Dict[str, Any]]:
            if r.path == "/api/v1/fetch":
                if sum(1 for x in s.seen if x.path == "/api/v1/fetch") == 1:
                    return {"status": 200, "body": {"jobs": [job("a")]}}
                release.wait(60)  # the next long-poll is never answered while the test runs
                return {"status": 204}
            if r.path == "/api/v1/heartbeat":
                return {"status": 200, "body": {"jobs": {"a": {"status": "ok"}}}}
            if r.path == "/api/v1/fail/a":
                return {"status": 200, "body": {"status": "retrying", "attempts_remaining": 2}}
            return None

        s = self.fake(route)
        w = Worker(self.client(s.url), id="w1", concurrency=2, shutdown_grace=0.2, handle_signals=False)
        started = threading.Event()
        reasons: List[Any] = []

        def handler(j: Any, ctx: Any) -> None:
            ctx.progress({"current": 1, "total": 2})
            ctx.checkpoint({"offset": 1})
            started.set()
            ctx.wait()  # runs until the drain's grace is over
            reasons.append(ctx.reason)

        w.register("q", handler)
        t = threading.Thread(target=w.run)
        t.start()
        self.assertTrue(started.wait(10))
        until("the second long-poll", lambda: s.paths().count("/api/v1/fetch") == 2)
        w.stop()
        t.join(20)  # the second fetch is never answered: the grace alone ends the drain
        self.assertFalse(t.is_alive(), "run() waited for the long-poll")
        f = next(r for r in s.seen if r.path == "/api/v1/fail/a").body
        self.assertEqual(f, {"error": "worker_shutdown", "checkpoint": {"offset": 1}, "worker_id": "w1", "attempt": 1})
        until("the handler to see its cancel", lambda: len(reasons) == 1)
        self.assertIsInstance(reasons[0], WorkerShutdown)

    def test_a_drain_closes_the_fetch_in_flight_so_an_idle_worker_in_a_30s_long_poll_stops_without_its_answer(self) -> None:
        # The server never answers the fetch: run() can only return if the
        # drain closed the connection, which the server sees.
        fetched = threading.Event()
        closed = threading.Event()
        release = threading.Event()
        self.addCleanup(release.set)

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                bodies.append(json.loads(self.rfile.read(n)))
                fetched.set()
                self.connection.settimeout(None)
                # Hold the long-poll; a read answers b"" once the client closes.
                if self.connection.recv(1) == b"":
                    closed.set()
                release.wait()
                self.close_connection = True

        bodies: List[Any] = []
        srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.addCleanup(srv.server_close)
        self.addCleanup(srv.shutdown)
        w = Worker(self.client("http://127.0.0.1:%d" % srv.server_address[1]), id="w1", concurrency=4, handle_signals=False)
        w.register("q", lambda j, ctx: None)
        t = threading.Thread(target=w.run)
        t.start()
        self.assertTrue(fetched.wait(10))
        self.assertEqual(bodies[0]["timeout"], 30, "the default long-poll")
        self.assertEqual(bodies[0]["count"], 4)
        w.stop()
        t.join(25)  # the 30 s poll is never answered: only the closed connection can end it
        self.assertFalse(t.is_alive(), "run() waited for the long-poll")
        self.assertTrue(closed.wait(10), "the server did not see the fetch's connection close")
        self.assertEqual(len(bodies), 1, "the drain fetched again")

    def test_a_drain_hands_back_what_an_ack_in_flight_claimed(self) -> None:
        acked = threading.Event()
        go = threading.Event()
        self.addCleanup(go.set)

        def route(r: Req, n: int) -> Optional[Dict[str, Any]]:
            if r.path == "/api/v1/fetch":
                if sum(1 for x in s.seen if x.path == "/api/v1/fetch") == 1:
                    return {"status": 200, "body": {"jobs": [job("a")]}}
                go.wait(10)
                return {"status": 204}
            if r.path == "/api/v1/ack/a":
                acked.set()
                go.wait(10)  # answered once the drain began, with the slot's next job
                return {"status": 200, "body": {"status": "completed", "jobs": [job("b")]}}
            if r.path == "/api/v1/unclaim/b":
                return {"status": 200, "body": {"status": "pending"}}
            return None

        s = self.fake(route)
        w = Worker(self.client(s.url), id="w1", concurrency=1, handle_signals=False)
        ran: List[str] = []
        w.register("q", lambda j, ctx: ran.append(j["job_id"]))
        t = threading.Thread(target=w.run)
        t.start()
        self.assertTrue(acked.wait(10))
        w.stop()
        go.set()
        t.join(10)
        self.assertFalse(t.is_alive())
        self.assertEqual(ran, ["a"], "a job claimed as the drain began ran")
        # Given back unstarted: an unclaim (the attempt not counted), not a fail.
        f = next(r for r in s.seen if r.path == "/api/v1/unclaim/b").body
        self.assertEqual(f, {"worker_id": "w1", "attempt": 1})
        self.assertNotIn("/api/v1/fail/b", s.paths())

    def test_a_server_without_unclaim_has_a_given_back_job_failed_with_worker_shutdown(self) -> None:
        def route(r: Req, n: int) -> Optional[Dict[str, Any]]:
            if r.path.startswith("/api/v1/fail/"):
                return {"status": 200, "body": {"status": "retrying", "attempts_remaining": 2}}
            return None  # 404, as an older server answers /api/v1/unclaim/{id}

        s = self.fake(route)
        w = Worker(self.client(s.url), id="w1", handle_signals=False)
        w._hand_back([job("b", attempt=2)])
        self.assertEqual(s.paths(), ["/api/v1/unclaim/b", "/api/v1/fail/b"])
        self.assertEqual(s.seen[1].body, {"error": "worker_shutdown", "worker_id": "w1", "attempt": 2})

if __name__ == "__main__":
    unittest.main()


def _ok_all(body: Any, **extra: Any) -> Dict[str, Any]:
    return {"status": 200, "body": {"jobs": {k: dict({"status": "ok"}, **extra) for k in body["jobs"]}}}


class TestWorkerLLM(Base):
    """Usage, budgets and routing, as the Go SDK's worker (sdk/go/worker.go)."""

    def llm_fake(self, jobs: List[Dict[str, Any]], hb: Callable[[Any], Dict[str, Any]]) -> Fake:
        fetched = threading.Event()

        def route(r: Req, n: int) -> Optional[Dict[str, Any]]:
            if r.path == "/api/v1/fetch":
                if not fetched.is_set():
                    fetched.set()
                    return {"status": 200, "body": {"jobs": jobs}}
                time.sleep(0.02)
                return {"status": 204}
            if r.path == "/api/v1/heartbeat":
                return hb(r.body)
            if r.path.startswith("/api/v1/ack"):
                return {"status": 200, "body": {"status": "completed", "acked": 1, "errors": [], "jobs": []}}
            if r.path.startswith("/api/v1/fail/"):
                return {"status": 200, "body": {"status": "retrying", "attempts_remaining": 1}}
            return None

        return self.fake(route)

    def run_worker(self, s: Fake, handler: Callable[[Any, Any], Any], done: Callable[[], bool], **kw: Any) -> None:
        w = Worker(self.client(s.url), id="w1", concurrency=1, fetch_timeout=1, heartbeat_interval=0.01, handle_signals=False, **kw)
        w.register("q", handler)
        t = threading.Thread(target=w.run)
        t.start()
        try:
            until("the job's outcome", done)
        finally:
            w.stop()
            t.join(10)

    def test_usage_rides_the_heartbeats_as_a_running_total_and_the_ack_carries_only_what_came_after(self) -> None:
        s = self.llm_fake([job("a")], _ok_all)

        def hb_usage() -> List[Any]:
            with s.lock:
                return [r.body["jobs"]["a"]["usage"] for r in s.seen if r.path == "/api/v1/heartbeat" and "usage" in r.body["jobs"]["a"]]

        seen: Dict[str, Any] = {}

        def handler(j: Any, ctx: Any) -> Any:
            ctx.report_usage(input_tokens=1000, output_tokens=100, model="fake-large", provider="fake", cost_usd=0.011, latency_ms=800)
            ctx.report_usage({"input_tokens": 500, "output_tokens": 50, "cache_read_tokens": 400, "cost_usd": 0.0055})
            # Until a heartbeat the server answered "ok" carried the total.
            until("two heartbeats with usage", lambda: len(hb_usage()) >= 2)
            ctx.report_usage(input_tokens=70, output_tokens=7, cost_usd=0.00077, model="fake-small")
            seen.update(ctx.usage)
            with self.assertRaises(TypeError):
                ctx.report_usage(tokens=1)
            return {"answer": "Paris"}

        self.run_worker(s, handler, lambda: any(p.startswith("/api/v1/ack") for p in s.paths()))
        self.assertEqual(
            hb_usage()[0],
            {"input_tokens": 1500, "output_tokens": 150, "cache_read_tokens": 400, "model": "fake-large", "provider": "fake", "cost_usd": 0.0165, "latency_ms": 800},
        )
        self.assertEqual(
            seen,
            {"input_tokens": 1570, "output_tokens": 157, "cache_read_tokens": 400, "model": "fake-small", "provider": "fake", "cost_usd": 0.01727, "latency_ms": 800},
        )
        ack = next(r for r in s.seen if r.path.startswith("/api/v1/ack"))
        self.assertEqual(ack.body["usage"], {"input_tokens": 70, "output_tokens": 7, "cost_usd": 0.00077, "model": "fake-small", "provider": "fake"})

    def test_an_ack_waits_for_the_heartbeat_in_flight_applied_it_reported_all_refused_the_ack_carries_it(self) -> None:
        for answer in ("ok", "error"):
            with self.subTest(answer=answer):
                gate = threading.Event()
                returned = threading.Event()

                def hb(body: Any, answer: str = answer, gate: threading.Event = gate) -> Dict[str, Any]:
                    gate.wait(10)
                    return _ok_all(body) if answer == "ok" else {"status": 500, "body": {"error": "boom", "code": "internal"}}

                s = self.llm_fake([job("a")], hb)

                def handler(j: Any, ctx: Any, s: Fake = s, returned: threading.Event = returned) -> Any:
                    ctx.report_usage(input_tokens=10, cost_usd=0.5, model="m")
                    until("a heartbeat with the usage", lambda: any(r.path == "/api/v1/heartbeat" and "usage" in r.body["jobs"]["a"] for r in list(s.seen)))
                    returned.set()
                    return 1

                def done(s: Fake = s, gate: threading.Event = gate, returned: threading.Event = returned) -> bool:
                    if returned.is_set() and not gate.is_set():
                        # The handler returned while the heartbeat is held: an ack
                        # that did not wait for it would be out with all the usage.
                        time.sleep(0.05)
                        gate.set()
                    return any(p.startswith("/api/v1/ack") for p in s.paths())

                self.run_worker(s, handler, done, on_error=lambda e: None)
                ack = next(r for r in s.seen if r.path.startswith("/api/v1/ack"))
                if answer == "ok":
                    self.assertNotIn("usage", ack.body, "the heartbeat reported it all")
                else:
                    self.assertEqual(ack.body["usage"], {"input_tokens": 10, "cost_usd": 0.5, "model": "m"})

    def test_budget_exceeded_on_a_heartbeat_cancels_the_job_with_budget_exceeded_or_only_flags_it_with_continue_over_budget(self) -> None:
        s = self.llm_fake([job("a")], lambda b: _ok_all(b, budget_exceeded=True))
        got: Dict[str, Any] = {}

        def handler(j: Any, ctx: Any) -> Any:
            ctx.report_usage(cost_usd=0.02)
            ctx.wait(10)
            got["reason"], got["flag"] = ctx.reason, ctx.budget_exceeded
            ctx.raise_if_cancelled()
            return "not reached"

        self.run_worker(s, handler, lambda: "/api/v1/fail/a" in s.paths())
        self.assertIsInstance(got["reason"], BudgetExceeded)
        self.assertTrue(got["flag"])
        f = next(r for r in s.seen if r.path == "/api/v1/fail/a").body
        self.assertEqual(f["error"], "corvo: job budget exceeded")
        self.assertNotIn("provider_error", f)

        s2 = self.llm_fake([job("b")], lambda b: _ok_all(b, budget_exceeded=True))

        def go_on(j: Any, ctx: Any) -> Any:
            got["before"] = ctx.budget_exceeded
            until("budget_exceeded", lambda: ctx.budget_exceeded)
            got["cancelled"] = ctx.cancelled
            return "done anyway"

        self.run_worker(s2, go_on, lambda: any(p.startswith("/api/v1/ack") for p in s2.paths()), continue_over_budget=True)
        self.assertFalse(got["before"])
        self.assertFalse(got["cancelled"])
        self.assertEqual(next(r for r in s2.seen if r.path.startswith("/api/v1/ack")).body["result"], "done anyway")

    def test_a_fetched_jobs_routing_names_the_model_and_a_provider_error_fails_with_provider_error(self) -> None:
        s = self.llm_fake([dict(job("a"), routing={"target": "gpt-4o", "index": 1})], _ok_all)
        got: Dict[str, Any] = {}

        def handler(j: Any, ctx: Any) -> Any:
            got["target"] = j["routing"]["target"]
            raise ProviderError("HTTP 529 overloaded")

        self.run_worker(s, handler, lambda: "/api/v1/fail/a" in s.paths())
        self.assertEqual(got["target"], "gpt-4o")
        f = next(r for r in s.seen if r.path == "/api/v1/fail/a").body
        self.assertEqual(f["error"], "HTTP 529 overloaded")
        self.assertIs(f["provider_error"], True)
