"""The language-neutral conformance suite (sdk/conformance/scenarios.json),
run by the Python SDK against a real server: each scenario of the file has
its implementation below, keyed by its id, and the tests fail when one is
missing (or when this file implements an id the list lacks)."""

from __future__ import annotations

import datetime as dt
import http.client
import json
import os
import threading
import unittest
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List

from _server import REPO_ROOT, ServerCase, free_addr, until, wait_state

from corvo import Client, ConflictError, CorvoError, JobCancelled, NotFoundError, Worker, is_conflict

with open(os.path.join(REPO_ROOT, "sdk/conformance/scenarios.json"), encoding="utf-8") as f:
    SUITE = json.load(f)

Scenario = Callable[["unittest.TestCase", Client, str, str], None]
SCENARIOS: Dict[str, Scenario] = {}


def scenario(fn: Scenario) -> Scenario:
    SCENARIOS[fn.__name__] = fn
    return fn


class Running:
    """A worker running in a thread until stop() (which waits for run() to end)."""

    def __init__(self, w: Worker):
        self.w = w
        self.err: List[BaseException] = []
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self) -> None:
        try:
            self.w.run()
        except BaseException as e:  # surfaced by stop()
            self.err.append(e)

    def stop(self) -> None:
        self.w.stop()
        self.t.join(60)
        if self.t.is_alive():
            raise AssertionError("the worker did not stop")
        if self.err:
            raise self.err[0]


def fetch_one(t: unittest.TestCase, c: Client, queue: str, worker: str, timeout: float) -> Dict[str, Any]:
    jobs = c.fetch([queue], worker_id=worker, timeout=timeout)
    t.assertEqual(len(jobs), 1, "fetch %s: %d jobs" % (queue, len(jobs)))
    return jobs[0]


def raises_with(t: unittest.TestCase, fn: Callable[[], Any], status: int, code: str) -> CorvoError:
    try:
        fn()
    except CorvoError as err:
        t.assertEqual(err.status, status, str(err))
        t.assertEqual(err.code, code, str(err))
        return err
    raise AssertionError("want a %d %s error, got none" % (status, code))


def parse_time(s: str) -> dt.datetime:
    return dt.datetime.fromisoformat(s.replace("Z", "+00:00"))


@scenario
def enqueue_fetch_ack(t: unittest.TestCase, c: Client, q: str, url: str) -> None:
    en = c.enqueue(q, {"n": 7}, priority="high", max_retries=4, tags={"tenant": "acme"})
    t.assertEqual(en["status"], "pending")
    t.assertTrue(en["job_id"])
    j = fetch_one(t, c, q, "py-w", 5)
    t.assertEqual(j["job_id"], en["job_id"])
    t.assertEqual(j["attempt"], 1)
    t.assertEqual(j["payload"], {"n": 7})
    t.assertEqual(j["priority"], "high")
    t.assertEqual(j["max_retries"], 4)
    t.assertEqual(j["tags"], {"tenant": "acme"})
    t.assertTrue(j["lease_expires_at"])
    c.ack(j["job_id"], result={"ok": True}, worker_id="py-w", attempt=j["attempt"])
    doc = c.job(j["job_id"])
    t.assertEqual(doc["state"], "completed")
    t.assertEqual(doc["result"], {"ok": True})
    t.assertEqual(doc["attempt"], 1)
    t.assertEqual(c.fetch([q], worker_id="py-w", timeout=0), [])


@scenario
def ack_and_fetch(t: unittest.TestCase, c: Client, q: str, url: str) -> None:
    ids = [c.enqueue(q, i)["job_id"] for i in range(4)]
    w = "py-af"
    first = fetch_one(t, c, q, w, 5)
    out = c.ack_and_fetch(first["job_id"], {"queues": [q], "worker_id": w, "count": 1}, worker_id=w, attempt=first["attempt"])
    t.assertEqual(out["status"], "completed")
    t.assertEqual(len(out["jobs"]), 1)
    t.assertNotEqual(out["jobs"][0]["job_id"], first["job_id"])
    second = out["jobs"][0]
    res = c.ack_batch_and_fetch(
        [{"job_id": second["job_id"], "worker_id": w, "attempt": second["attempt"]}], {"queues": [q], "worker_id": w, "count": 2}
    )
    t.assertEqual(res["acked"], 1)
    t.assertEqual(res["errors"], [])
    t.assertEqual(len(res["jobs"]), 2)
    both = c.ack_batch([{"job_id": j["job_id"], "worker_id": w, "attempt": j["attempt"]} for j in res["jobs"]])
    t.assertEqual(both["acked"], 2)
    t.assertEqual(both["errors"], [])
    for i in ids:
        t.assertEqual(c.job(i)["state"], "completed")


@scenario
def fail_retry_backoff(t: unittest.TestCase, c: Client, q: str, url: str) -> None:
    en = c.enqueue(q, max_retries=2, retry_backoff="fixed", retry_base_delay="1s")
    j = fetch_one(t, c, q, "py-w", 5)
    before = dt.datetime.now(dt.timezone.utc)
    fr = c.fail(j["job_id"], "smtp timeout", backtrace="at send()", worker_id="py-w", attempt=j["attempt"])
    t.assertEqual(fr["status"], "retrying")
    t.assertEqual(fr["attempts_remaining"], 1)
    next_at = parse_time(fr["next_attempt_at"])
    t.assertGreaterEqual(next_at, before + dt.timedelta(milliseconds=950), "next attempt at %s, failed at %s" % (next_at, before))
    doc = c.job(en["job_id"])
    t.assertEqual(doc["state"], "retrying")
    t.assertEqual(doc["last_error"], "smtp timeout")
    t.assertEqual(c.fetch([q], worker_id="py-w"), [], "fetched a job before its backoff ran out")
    j = fetch_one(t, c, q, "py-w", 10)
    t.assertEqual(j["job_id"], en["job_id"])
    t.assertEqual(j["attempt"], 2)
    fr = c.fail(j["job_id"], "smtp timeout", worker_id="py-w", attempt=j["attempt"])
    t.assertEqual(fr["status"], "dead")
    t.assertEqual(fr["attempts_remaining"], 0)
    dead = c.job(en["job_id"])
    t.assertEqual(dead["state"], "dead")
    t.assertEqual(len(dead["errors"]), 2)


@scenario
def heartbeat_progress_cancel(t: unittest.TestCase, c: Client, q: str, url: str) -> None:
    en = c.enqueue(q)
    progress = {"current": 3, "total": 10}
    w = Worker(c, concurrency=1, fetch_timeout=1, heartbeat_interval=0.1, handle_signals=False)
    seen: List[Any] = []
    ended = threading.Event()

    def handler(job: Any, ctx: Any) -> None:
        ctx.progress(progress)
        ctx.cancel_event.wait(30)
        seen.append(ctx.reason)
        ended.set()
        ctx.raise_if_cancelled()

    w.register(q, handler)
    r = Running(w)
    try:
        until("the progress", lambda: c.job(en["job_id"]).get("progress") == progress)
        t.assertEqual(c.cancel(en["job_id"]), "cancelling")
        t.assertTrue(ended.wait(20), "the handler's cancel event never fired")
        t.assertIsInstance(seen[0], JobCancelled)
        wait_state(c, en["job_id"], "cancelled")
    finally:
        r.stop()


@scenario
def checkpoint_survives_drain(t: unittest.TestCase, c: Client, q: str, url: str) -> None:
    en = c.enqueue(q, retry_backoff="none", max_retries=5)
    checkpoint = {"offset": 47000}
    w = Worker(c, concurrency=1, fetch_timeout=1, shutdown_grace=0.3, handle_signals=False)
    stored = threading.Event()

    def handler(job: Any, ctx: Any) -> None:
        ctx.checkpoint(checkpoint)
        stored.set()
        ctx.wait(30)
        ctx.raise_if_cancelled()

    w.register(q, handler)
    r = Running(w)
    t.assertTrue(stored.wait(20), "the handler never stored its checkpoint")
    r.stop()  # what SIGTERM does
    doc = c.job(en["job_id"])
    t.assertEqual(doc["state"], "pending")
    t.assertEqual([e["error"] for e in doc["errors"]], ["worker_shutdown"])
    j = fetch_one(t, c, q, "py-w", 5)
    t.assertEqual(j["job_id"], en["job_id"])
    t.assertEqual(j["attempt"], 2)
    t.assertEqual(j["checkpoint"], checkpoint)
    c.ack(j["job_id"], worker_id="py-w", attempt=j["attempt"])


@scenario
def lease_reclaim_stale_ack(t: unittest.TestCase, c: Client, q: str, url: str) -> None:
    en = c.enqueue(q, lease_duration=1, retry_backoff="none")
    a = fetch_one(t, c, q, "py-a", 5)
    b = fetch_one(t, c, q, "py-b", 15)
    t.assertEqual([a["job_id"], a["attempt"], b["job_id"], b["attempt"]], [en["job_id"], 1, en["job_id"], 2])
    err = raises_with(t, lambda: c.ack(a["job_id"], worker_id="py-a", attempt=a["attempt"]), 409, "conflict")
    t.assertIsInstance(err, ConflictError)
    t.assertTrue(is_conflict(err))
    t.assertEqual(c.heartbeat("py-a", {a["job_id"]: {"attempt": a["attempt"]}}), {a["job_id"]: "lost"})
    c.ack(b["job_id"], worker_id="py-b", attempt=b["attempt"])
    doc = c.job(en["job_id"])
    t.assertEqual(doc["state"], "completed")
    t.assertIn("lease expired", doc["errors"][0]["error"])


@scenario
def unclaim(t: unittest.TestCase, c: Client, q: str, url: str) -> None:
    en = c.enqueue(q, max_retries=0)
    j = fetch_one(t, c, q, "py-w", 5)
    t.assertEqual([j["job_id"], j["attempt"]], [en["job_id"], 1])
    raises_with(t, lambda: c.unclaim(j["job_id"], "py-other", 1), 409, "conflict")
    t.assertEqual(c.unclaim(j["job_id"], "py-w", j["attempt"]), {"status": "pending"})
    doc = c.job(en["job_id"])
    t.assertEqual(doc["state"], "pending")
    t.assertEqual(doc["attempt"], 0)
    t.assertFalse(doc.get("errors"))
    raises_with(t, lambda: c.unclaim(j["job_id"], "py-w", j["attempt"]), 409, "conflict")
    again = fetch_one(t, c, q, "py-w", 5)
    t.assertEqual([again["job_id"], again["attempt"]], [en["job_id"], 1])
    c.ack(again["job_id"], worker_id="py-w", attempt=again["attempt"])
    t.assertEqual(c.job(en["job_id"])["state"], "completed")


@scenario
def unique(t: unittest.TestCase, c: Client, q: str, url: str) -> None:
    first = c.enqueue(q, unique_key="welcome-user-1")
    again = c.enqueue(q, unique_key="welcome-user-1")
    t.assertFalse(first["unique_existing"])
    t.assertTrue(again["unique_existing"])
    t.assertEqual(again["job_id"], first["job_id"])
    t.assertEqual(again["status"], "pending")
    queue = [x for x in c.queues() if x["name"] == q]
    t.assertEqual(queue[0]["pending"], 1)
    j = fetch_one(t, c, q, "py-w", 5)
    c.ack(j["job_id"], worker_id="py-w", attempt=j["attempt"])
    later = c.enqueue(q, unique_key="welcome-user-1")
    t.assertFalse(later["unique_existing"])
    t.assertNotEqual(later["job_id"], first["job_id"])


@scenario
def batch_callback(t: unittest.TestCase, c: Client, q: str, url: str) -> None:
    done = q + ".done"
    b = c.enqueue_batch(
        [{"queue": q, "payload": 1}, {"queue": q, "payload": 2}, {"queue": q, "payload": 3, "max_retries": 1}],
        callback_queue=done,
        callback_payload={"album_id": "album_42"},
    )
    t.assertEqual(len(b["job_ids"]), 3)
    t.assertTrue(b["batch_id"])
    st = c.batch(b["batch_id"])
    t.assertEqual(st["total"], 3)
    t.assertEqual(st["pending"], 3)
    held: Dict[str, Any] = {}
    while len(held) < 3:
        for j in c.fetch([q], worker_id="py-w", timeout=5, count=3):
            held[j["job_id"]] = j
    for i, jid in enumerate(b["job_ids"]):
        if i < 2:
            c.ack(jid, worker_id="py-w", attempt=held[jid]["attempt"])
        else:
            t.assertEqual(c.fail(jid, "bad image", worker_id="py-w", attempt=held[jid]["attempt"])["status"], "dead")
    cb = fetch_one(t, c, done, "py-w", 10)
    t.assertEqual(cb["payload"]["album_id"], "album_42")
    t.assertEqual(cb["payload"]["batch"], {"id": b["batch_id"], "total": 3, "succeeded": 2, "failed": 1})
    st = c.batch(b["batch_id"])
    t.assertEqual(st["succeeded"], 2)
    t.assertEqual(st["failed"], 1)
    t.assertTrue(st["callback_job_id"])


@scenario
def chain(t: unittest.TestCase, c: Client, q: str, url: str) -> None:
    extract, summarize = q + ".extract", q + ".summarize"
    en = c.enqueue(extract, {"doc": "d1"}, chain={"steps": [{"queue": extract}, {"queue": summarize, "payload": {"mode": "short"}}]})
    j = fetch_one(t, c, extract, "py-w", 5)
    doc = c.job(en["job_id"])
    t.assertTrue(doc["chain_id"])
    t.assertEqual(doc["chain_step"], 0)
    result = {"text": "extracted"}
    c.ack(j["job_id"], result=result, worker_id="py-w", attempt=j["attempt"])
    nxt = fetch_one(t, c, summarize, "py-w", 10)
    t.assertEqual(nxt["payload"]["mode"], "short")
    t.assertEqual(nxt["payload"]["previous_result"], result)
    t.assertEqual(c.job(nxt["job_id"])["chain_id"], doc["chain_id"])
    c.ack(nxt["job_id"], worker_id="py-w", attempt=nxt["attempt"])
    for i in (en["job_id"], nxt["job_id"]):
        t.assertEqual(c.job(i)["state"], "completed")


@scenario
def search_paging(t: unittest.TestCase, c: Client, q: str, url: str) -> None:
    tags = {"run": "search-paging"}
    want = {c.enqueue(q, i, tags=tags)["job_id"] for i in range(7)}
    r = dict(queue=q, tags=tags, limit=3, sort="created_at", order="asc")
    t.assertEqual([len(p["jobs"]) for p in c.search_pages(**r)], [3, 3, 1])
    got = [hit["id"] for hit in c.search_all(**r)]
    t.assertEqual(len(set(got)), len(got), "a job on two pages")
    t.assertEqual(set(got), want)
    one = c.search(**r)
    t.assertTrue(one["has_more"])
    t.assertEqual(one["total"], 7)


@scenario
def bulk(t: unittest.TestCase, c: Client, q: str, url: str) -> None:
    ids = [c.enqueue(q, i)["job_id"] for i in range(5)]
    by_ids = c.bulk("change_priority", job_ids=ids[:2], priority="critical")
    t.assertNotIn("accepted", by_ids)
    t.assertEqual(by_ids["result"]["affected"], 2)
    t.assertEqual(by_ids["result"]["errors"], 0)
    t.assertEqual(c.job(ids[0])["priority"], "critical")
    raises_with(t, lambda: c.bulk("cancel", filter={"queue": q}), 400, "confirmation_required")
    bg = c.bulk("cancel", filter={"queue": q, "state": ["pending"]}, async_=True, confirm=True)
    t.assertNotIn("result", bg)
    op = bg["accepted"]["bulk_operation_id"]
    t.assertTrue(op)
    progress: List[Any] = []
    final = c.watch_bulk(op, progress.append)
    t.assertEqual(final["status"], "completed")
    t.assertEqual(final["affected"], 5)
    t.assertEqual(c.bulk_status(op)["status"], "completed")
    for i in ids:
        t.assertEqual(c.job(i)["state"], "cancelled")


@scenario
def events_resume(t: unittest.TestCase, c: Client, q: str, url: str) -> None:
    def next_job(stream: Any) -> Any:
        for ev in stream:
            t.assertNotEqual(ev["type"], "reset", ev.get("reason"))
            if ev["type"] == "job":
                return ev
        raise AssertionError("the stream ended")

    # events() answers once the server has opened the stream.
    with c.events(queues=[q], types=["enqueued"], timeout=20) as s:
        a = c.enqueue(q, "a")
        last_id = None
        while last_id is None:
            ev = next_job(s)
            if ev["job"]["job_id"] == a["job_id"] and ev["job"]["type"] == "enqueued":
                last_id = ev["id"]
    t.assertEqual(s.last_event_id, last_id)
    b = c.enqueue(q, "b")
    d = c.enqueue(q, "c")
    with c.events(queues=[q], types=["enqueued"], last_event_id=last_id, timeout=20) as s:
        for want in (b["job_id"], d["job_id"]):
            ev = next_job(s)
            t.assertEqual(ev["job"]["job_id"], want)
            t.assertEqual(ev["job"]["type"], "enqueued")


@scenario
def backoff_429(t: unittest.TestCase, c: Client, q: str, url: str) -> None:
    key = c.create_key("py-backoff", role="producer", rate_write=1)["key"]
    statuses = []
    retry_after = ""
    host = url[len("http://") :]
    for _ in range(2):
        conn = http.client.HTTPConnection(host, timeout=10)
        conn.request("POST", "/api/v1/enqueue", json.dumps({"queue": q}), {"Content-Type": "application/json", "Authorization": "Bearer " + key})
        res = conn.getresponse()
        res.read()
        statuses.append(res.status)
        retry_after = res.getheader("retry-after") or ""
        conn.close()
    t.assertEqual(statuses, [201, 429])
    t.assertGreaterEqual(float(retry_after), 1, "Retry-After %r" % retry_after)
    kc = Client(url, api_key=key)
    t.addCleanup(kc.close)
    t.assertTrue(kc.enqueue(q)["job_id"])
    kc.max_retries = 0
    raised = 0
    for _ in range(2):
        try:
            kc.enqueue(q)
        except CorvoError as err:
            t.assertEqual(err.status, 429)
            t.assertEqual(err.code, "rate_limited")
            t.assertGreaterEqual(err.retry_after, 1, "retry after %s s" % err.retry_after)
            raised += 1
    t.assertGreater(raised, 0, "two enqueues in a row at 1 a second: none was refused")


@scenario
def failover(t: unittest.TestCase, c: Client, q: str, url: str) -> None:
    dead = "http://" + free_addr()  # nothing listens there
    fc = Client([dead, url])
    t.addCleanup(fc.close)
    en = fc.enqueue(q)
    t.assertEqual(fc.urls[0], url)
    t.assertEqual(fc.job(en["job_id"])["queue"], q)


@scenario
def typed_errors(t: unittest.TestCase, c: Client, q: str, url: str) -> None:
    err = raises_with(t, lambda: c.job("job_0_01JD5Q8Y6Z3M4N5P6Q7R8S9T0V"), 404, "not_found")
    t.assertIsInstance(err, NotFoundError)
    raises_with(t, lambda: c.enqueue("bad queue!"), 400, "invalid_request")
    raises_with(t, lambda: c.ack("job_0_01JD5Q8Y6Z3M4N5P6Q7R8S9T0V", worker_id="py-w", attempt=1), 404, "not_found")


@scenario
def worker_runtime(t: unittest.TestCase, c: Client, q: str, url: str) -> None:
    ids = []
    for i in range(12):
        if i == 5:
            ids.append(c.enqueue(q, {"n": i, "fail": True}, max_retries=1)["job_id"])
        else:
            ids.append(c.enqueue(q, {"n": i})["job_id"])
    w = Worker(c, concurrency=4, fetch_timeout=1, handle_signals=False)
    lock = threading.Lock()
    running = [0, 0]  # now, most
    gate = threading.Event()

    def handler(job: Any, ctx: Any) -> Any:
        with lock:
            running[0] += 1
            running[1] = max(running[1], running[0])
        try:
            gate.wait(0.005)
            if job["payload"].get("fail"):
                raise RuntimeError("boom")
            return {"double": 2 * job["payload"]["n"]}
        finally:
            with lock:
                running[0] -= 1

    w.register(q, handler)
    r = Running(w)
    try:
        for i, jid in enumerate(ids):
            if i == 5:
                t.assertIn("boom", wait_state(c, jid, "dead")["last_error"])
            else:
                t.assertEqual(wait_state(c, jid, "completed")["result"], {"double": 2 * i})
    finally:
        r.stop()
    t.assertLessEqual(running[1], 4, "%d handlers ran at once, concurrency 4" % running[1])
    t.assertTrue(any(x["id"] == w.id for x in c.workers()), "the worker is not listed")


@scenario
def enqueue_coalescing(t: unittest.TestCase, c: Client, q: str, url: str) -> None:
    prefix = 'corvo_http_requests_total{route="POST /api/v1/enqueue/batch",'

    def batch_requests() -> float:
        return sum(float(line.rsplit(" ", 1)[1]) for line in c.metrics().split("\n") if line.startswith(prefix))

    before = batch_requests()
    start = threading.Barrier(200)

    def one(i: int) -> Any:
        start.wait()
        return c.enqueue(q, i)

    with ThreadPoolExecutor(200) as ex:
        answers = list(ex.map(one, range(200)))
    ids = {a["job_id"] for a in answers}
    t.assertEqual(len(ids), 200)
    t.assertNotIn("", ids)
    t.assertEqual([x for x in c.queues() if x["name"] == q][0]["pending"], 200)
    t.assertGreater(batch_requests(), before, "no call was coalesced")


class TestConformance(ServerCase):
    SERVER_ARGS = SUITE["server"]["args"]

    def test_every_scenario_implemented_and_only_those(self) -> None:
        listed = [s["id"] for s in SUITE["scenarios"]]
        missing = [i for i in listed if i not in SCENARIOS]
        self.assertEqual(missing, [], "scenarios without an implementation in the Python SDK: " + ", ".join(missing))
        extra = [i for i in SCENARIOS if i not in listed]
        self.assertEqual(extra, [], "implemented scenarios that scenarios.json does not list: " + ", ".join(extra))

    def run_scenario(self, sid: str) -> None:
        impl = SCENARIOS.get(sid)
        if impl is None:
            self.fail("scenario %s has no implementation in the Python SDK" % sid)
        c = Client(self.server.url)
        try:
            impl(self, c, "py." + sid, self.server.url)
        finally:
            c.close()


# One test per scenario of the file, run one after another on the one
# server (enqueue_coalescing reads a server-wide counter).
for _s in SUITE["scenarios"]:

    def _test(self: TestConformance, sid: str = _s["id"]) -> None:
        self.run_scenario(sid)

    _test.__doc__ = "conformance: %s — %s" % (_s["id"], _s["title"])
    setattr(TestConformance, "test_scenario_" + _s["id"], _test)


if __name__ == "__main__":
    unittest.main()
