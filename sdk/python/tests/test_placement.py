"""Placement routing (corvo/placement.py, as sdk/go/placement.go and
sdk/typescript/src/placement.ts): the queue → shard hash is the server's
(xxhash64, vectors from the Go implementation), scripted nodes show the
routing rules, and a real 3-node cluster shows that a client knowing the
placement has nothing forwarded, and that a worker fetches from each node
only the queues it leads, sharing its slots between the nodes."""

from __future__ import annotations

import json
import threading
import time
import unittest
from typing import Any, Callable, Dict, List, Optional, Tuple

from _server import TEST_CLUSTER_SECRET, Server, free_addr, until
from test_unit import Fake, Req

from corvo import Client, Worker
from corvo.placement import (
    FORWARDED_HEADER,
    plan_placement,
    shard_for_queue,
    shard_of_job_id,
    stored_queue,
    xxhash64,
)

# xxhash.Sum64String(s) of github.com/cespare/xxhash/v2, printed by Go (the
# vectors of sdk/typescript/test/placement.test.mjs): every length class of
# the algorithm (0–3, 4–7, 8–31 bytes, 32-byte stripes and their tails) and
# multi-byte UTF-8.
VECTORS = [
    ("", "ef46db3751d8e999"),
    ("a", "d24ec4f1a98c6e5b"),
    ("ab", "65f708ca92d04a61"),
    ("abc", "44bc2cf5ad770999"),
    ("abcd", "de0327b0d25d92cc"),
    ("abcde", "07e3670c0c8dc7eb"),
    ("q0", "015429239dc4a741"),
    ("default", "cb14bd8a5c561c96"),
    ("emails.send", "1c2424aab960d584"),
    ("acme/emails.send", "64cd0127b0056c57"),
    ("ünïcödé/队列", "0fb86e0f090e4c2d"),
    ("0123456789abcdef0123456789abcde", "1fdfc63febacfde7"),
    ("0123456789abcdef0123456789abcdef", "642a94958e71e6c5"),
    ("0123456789abcdef0123456789abcdef0", "e87684f08d6d0816"),
    ("corvo.c", "9099a03bb95d6410"),
    ("corvo.co", "d1ddaa8e65967e78"),
    ("corvo.cor", "a6f16be37f64d257"),
    ("corvo.corvo.cor", "f7e02f2910a59ae4"),
    ("corvo.corvo.corv", "b811dfb067650a40"),
    ("corvo.corvo.corvo", "fe7dc70b7d0830f2"),
    ("corvo.corvo.corvo.corvo.corvo.c", "add426e2a03c4f61"),
    ("corvo.corvo.corvo.corvo.corvo.cor", "0b87823a410e7d11"),
    ("corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.cor", "98c14a546c2b3cc7"),
    ("corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corv", "5bda8f9603e2dc1e"),
    ("corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo", "3e6c558d7319791c"),
    ("corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corv", "fbf5b9727aa72f43"),
    (
        "corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.co",
        "13216d321c9feda0",
    ),
    (
        "corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.co",
        "2b96889974931b99",
    ),
]


def queue_on(shard: int, shards: int, prefix: str, ns: str = "") -> str:
    """The first queue prefix.q<i> whose stored name (in namespace ns) hashes to shard."""
    i = 0
    while shard_for_queue(stored_queue(ns, "%s.q%d" % (prefix, i)), shards) != shard:
        i += 1
    return "%s.q%d" % (prefix, i)


class TestHash(unittest.TestCase):
    def test_xxhash64_is_cespare_xxhash_v2_sum64string(self) -> None:
        for s, want in VECTORS:
            self.assertEqual("%016x" % xxhash64(s), want, "xxhash64(%r)" % s)
            self.assertEqual("%016x" % xxhash64(s.encode("utf-8")), want)

    def test_the_queue_to_shard_rule_is_the_servers_namespaced_queues_hash_as_stored_job_ids_give_their_shard(self) -> None:
        # The table sdk/go's TestShardForQueueGolden and the router's pin.
        got = " ".join("%s=%d" % (q, shard_for_queue(q, 4)) for q in ["default", "emails.send", "emails.bulk", "reports", "a", "q0", "q1", "q2"])
        self.assertEqual(got, "default=2 emails.send=0 emails.bulk=0 reports=2 a=3 q0=1 q1=0 q2=2")
        self.assertEqual(stored_queue("default", "q"), "q")
        self.assertEqual(stored_queue("", "q"), "q")
        self.assertEqual(stored_queue(None, "q"), "q")
        self.assertEqual(stored_queue("acme", "q"), "acme/q")
        ids = {"job_3_01HX7Y2K3M0000000000000000": 3, "job_12_01HX": 12, "job_x_1": -1, "batch_1_x": -1, "job_7": -1, "xjob_1_a": -1}
        for jid, want in ids.items():
            self.assertEqual(shard_of_job_id(jid), want, jid)

    def test_plan_placement_puts_each_shards_leader_first_then_its_other_placed_nodes_that_are_up(self) -> None:
        st: Dict[str, Any] = {
            "shard_count": 2,
            "nodes": [
                {"node_id": 1, "http_address": "a:1", "status": "up"},
                {"node_id": 2, "http_address": "b:1", "status": "up"},
                {"node_id": 3, "http_address": "c:1", "status": "down"},
            ],
            "shards": [
                {"shard_id": 0, "leader_node": 2, "placed_nodes": [1, 2, 3]},
                {"shard_id": 1, "leader_node": 3, "placed_nodes": [3, 1]},
                {"shard_id": 7, "leader_node": 1, "placed_nodes": [1]},  # out of range: ignored
            ],
        }
        p = plan_placement(st, "http://", "acme")
        assert p is not None
        self.assertEqual(p.ns, "acme")
        self.assertEqual(p.hosts, [["http://b:1", "http://a:1"], ["http://a:1"]])
        self.assertIsNone(plan_placement(dict(st, nodes=st["nodes"][:1]), "http://", ""), "one node routes nothing")
        self.assertIsNone(plan_placement(dict(st, shard_count=0), "http://", ""), "no shards route nothing")


def status(shards: int, nodes: List[Tuple[int, str]], placed: List[List[int]]) -> Dict[str, Any]:
    """A cluster status answer: nodes (id, address), shard i placed on placed[i] (its leader first)."""
    return {
        "status": 200,
        "body": {
            "shard_count": shards,
            "nodes": [{"node_id": i, "http_address": a, "status": "up"} for i, a in nodes],
            "shards": [{"shard_id": i, "leader_node": p[0], "placed_nodes": p} for i, p in enumerate(placed)],
        },
    }


ENQUEUED = {"status": 201, "body": {"job_id": "job_0_01HX", "status": "pending", "unique_existing": False}}


class TestRouting(unittest.TestCase):
    def fake(self, route: Callable[[Req, int], Optional[Dict[str, Any]]]) -> Fake:
        f = Fake(route)
        self.addCleanup(f.close)
        return f

    def client(self, url: Any, **kw: Any) -> Client:
        c = Client(url, **kw)
        self.addCleanup(c.close)
        return c

    @staticmethod
    def count(f: Fake, path: str) -> int:
        return f.paths().count(path)

    def test_a_routed_request_goes_to_its_shards_leader_an_unreachable_one_is_skipped_and_the_placement_read_again_a_503_goes_the_usual_way(
        self,
    ) -> None:
        dead = free_addr()  # nothing listens: the shard's leader is down
        reads = []
        b503 = threading.Event()

        def route_b(r: Req, n: int) -> Optional[Dict[str, Any]]:
            if r.path == "/api/v1/enqueue":
                if b503.is_set():
                    return {"status": 503, "headers": {"Retry-After": "0"}, "body": {"error": "no leader", "code": "unavailable"}}
                return ENQUEUED
            return None

        b = self.fake(route_b)

        def route_a(r: Req, n: int) -> Optional[Dict[str, Any]]:
            if r.path == "/api/v1/cluster/status":
                reads.append(1)
                return status(1, [(1, dead), (2, b.url[len("http://") :])], [[1, 2]])
            if r.path == "/api/v1/enqueue":
                return ENQUEUED
            return None

        a = self.fake(route_a)
        c = self.client(a.url, coalesce_enqueues=False)
        c.discover()
        self.assertEqual(len(reads), 1)
        c.enqueue("q")
        self.assertEqual(self.count(b, "/api/v1/enqueue"), 1, "the shard's other node did not get the enqueue")
        self.assertEqual(self.count(a, "/api/v1/enqueue"), 0, "the enqueue went the usual way, not routed")
        until("the placement read again after the dial failure", lambda: len(reads) == 2)
        c.enqueue("q")
        self.assertEqual(self.count(b, "/api/v1/enqueue"), 2, "the unreachable leader is left out for a while")
        b503.set()
        c.enqueue("q")
        self.assertEqual(self.count(b, "/api/v1/enqueue"), 3)
        self.assertEqual(self.count(a, "/api/v1/enqueue"), 1, "a 503 from the routed node goes the usual way")

    def test_an_answer_marked_forwarded_makes_the_client_read_the_placement_again_a_403_on_it_turns_routing_off(self) -> None:
        reads = []
        refuse = threading.Event()
        b = self.fake(
            lambda r, n: {"status": 200, "headers": {FORWARDED_HEADER: "1"}, "body": {"id": "job_1_01HX"}}
            if r.path == "/api/v1/jobs/job_1_01HX"
            else None
        )

        def route_a(r: Req, n: int) -> Optional[Dict[str, Any]]:
            if r.path == "/api/v1/cluster/status":
                reads.append(1)
                if refuse.is_set():
                    return {"status": 403, "body": {"error": "no cluster:read", "code": "forbidden"}}
                return status(2, [(1, a.url[7:]), (2, b.url[7:])], [[1], [2]])
            if r.path.startswith("/api/v1/jobs/"):
                return {"status": 200, "body": {"id": r.path.rsplit("/", 1)[1]}}
            return None

        a = self.fake(route_a)
        c = self.client(a.url)
        c.job("job_1_01HX")  # the first routed request starts reading the placement, and goes the usual way
        self.assertEqual(self.count(a, "/api/v1/jobs/job_1_01HX"), 1)
        until("the placement", lambda: c._place is not None)
        self.assertEqual(len(reads), 1)
        refuse.set()
        c.job("job_1_01HX")  # now routed to shard 1's node, which says it forwarded it
        self.assertEqual(self.count(b, "/api/v1/jobs/job_1_01HX"), 1)

        # Read again at most every 2 s: each forwarded answer asks for it.
        def again() -> bool:
            c.job("job_1_01HX")
            return len(reads) == 2

        until("the placement read again after a forwarded answer", again)
        before = self.count(a, "/api/v1/jobs/job_1_01HX")

        def off() -> bool:
            c.job("job_1_01HX")
            return self.count(a, "/api/v1/jobs/job_1_01HX") > before

        until("routing off once the 403 is read", off)
        routed = self.count(b, "/api/v1/jobs/job_1_01HX")
        c.job("job_1_01HX")
        c.job("job_0_01HX")
        self.assertEqual(self.count(b, "/api/v1/jobs/job_1_01HX"), routed, "still routed after a 403")
        self.assertEqual(len(reads), 2, "read again after a 403")

    def two_nodes(self, **kw: Any) -> Tuple[Fake, Fake, Client, List[Req]]:
        """Two scripted nodes, shard 0 on a and shard 1 on b, answering every
        routed route; a client that read the placement. seen: whoami reads."""
        whoami: List[Req] = []

        def answer(r: Req, n: int) -> Optional[Dict[str, Any]]:
            p = r.path.split("?")[0]
            if p == "/api/v1/cluster/status":
                return status(2, [(1, a.url[7:]), (2, b.url[7:])], [[1], [2]])
            if p == "/api/v1/auth/whoami":
                whoami.append(r)
                return {"status": 200, "body": {"namespace": "acme", "role": "admin"}}
            if p == "/api/v1/enqueue":
                return ENQUEUED
            if p == "/api/v1/enqueue/batch":
                return {"status": 201, "body": {"job_ids": ["job_0_%d" % i for i in range(len(r.body["jobs"]))]}}
            if p == "/api/v1/fetch":
                return {"status": 200, "body": {"jobs": []}}
            if p == "/api/v1/ack/batch":
                return {"status": 200, "body": {"acked": len(r.body["acks"]), "errors": [], "jobs": []}}
            if p.startswith("/api/v1/ack/"):
                return {"status": 200, "body": {"status": "completed", "jobs": []}}
            if p.startswith("/api/v1/fail/"):
                return {"status": 200, "body": {"status": "retrying", "attempts_remaining": 1}}
            if p == "/api/v1/heartbeat":
                return {"status": 200, "body": {"jobs": {k: {"status": "ok"} for k in r.body["jobs"]}}}
            if p.startswith("/api/v1/jobs/") or p.startswith("/api/v1/queues/"):
                return {"status": 200, "body": {"status": "ok"}}
            return None

        a = self.fake(answer)
        b = self.fake(answer)
        c = self.client(a.url, coalesce_enqueues=False, **kw)
        c.discover()
        return a, b, c, whoami

    def test_every_request_naming_one_queue_or_one_job_goes_to_its_shards_node_and_spanning_ones_to_the_node_of_most(self) -> None:
        a, b, c, _ = self.two_nodes()
        qa, qb, qb2 = queue_on(0, 2, "r"), queue_on(1, 2, "r"), queue_on(1, 2, "s")
        ja, jb, jb2 = "job_0_01HXA", "job_1_01HXB", "job_1_01HXC"
        calls: List[Tuple[str, Callable[[], Any], Fake]] = [
            ("enqueue", lambda: c.enqueue(qb), b),
            ("enqueue", lambda: c.enqueue(qa), a),
            ("enqueue_batch", lambda: c.enqueue_batch([{"queue": qa}, {"queue": qb}, {"queue": qb2}]), b),
            ("fetch", lambda: c.fetch([qa, qb, qb2], count=1), b),
            ("fetch", lambda: c.fetch([qa], count=1), a),
            ("ack", lambda: c.ack(jb), b),
            ("ack_and_fetch", lambda: c.ack_and_fetch(ja, {"queues": [qa], "count": 1}), a),
            ("ack_batch", lambda: c.ack_batch([{"job_id": ja}, {"job_id": jb}, {"job_id": jb2}]), b),
            ("ack_batch_and_fetch", lambda: c.ack_batch_and_fetch([{"job_id": ja}], {"queues": [qa], "count": 1}), a),
            ("fail", lambda: c.fail(jb, "boom"), b),
            ("heartbeat", lambda: c.heartbeat("w", {jb: {"attempt": 1}, ja: {"attempt": 1}, jb2: {"attempt": 1}}), b),
            ("job", lambda: c.job(jb), b),
            ("job", lambda: c.job(ja), a),
            ("cancel", lambda: c.cancel(jb), b),
            ("retry", lambda: c.retry(jb), b),
            ("move", lambda: c.move(jb, qa), b),
            ("delete_job", lambda: c.delete_job(jb), b),
            ("approve", lambda: c.approve(jb), b),
            ("reject", lambda: c.reject(jb), b),
            ("pause_queue", lambda: c.pause_queue(qb), b),
            ("resume_queue", lambda: c.resume_queue(qb), b),
            ("clear_queue", lambda: c.clear_queue(qb), b),
            ("drain_queue", lambda: c.drain_queue(qb), b),
            ("set_concurrency", lambda: c.set_concurrency(qb, 3), b),
            ("set_throttle", lambda: c.set_throttle(qb, 5, period="second"), b),
            ("set_throttle off", lambda: c.set_throttle(qb, None), b),
            ("delete_queue", lambda: c.delete_queue(qb), b),
        ]
        for name, call, want in calls:
            na, nb = len(a.seen), len(b.seen)
            call()
            got = (len(a.seen) - na, len(b.seen) - nb)
            self.assertEqual(got, (1, 0) if want is a else (0, 1), "%s went to the wrong node (a, b) = %s" % (name, got))
        # A job ID without a shard, and an unplaced shard, go the usual way (the current node, a).
        na = len(a.seen)
        c.job("legacy-id")
        c.job("job_9_01HX")
        self.assertEqual(len(a.seen) - na, 2)

    def test_queues_hash_as_stored_in_the_clients_namespace_or_the_keys_own(self) -> None:
        # A queue whose shard differs once stored as acme/<queue>.
        q = next(
            "n.q%d" % i for i in range(1000) if shard_for_queue("n.q%d" % i, 2) == 0 and shard_for_queue("acme/n.q%d" % i, 2) == 1
        )
        a, b, c, whoami = self.two_nodes(namespace="acme")
        self.assertEqual(whoami, [], "a namespace given needs no whoami")
        c.pause_queue(q)
        self.assertEqual((self.count(a, "/api/v1/queues/%s/pause" % q), self.count(b, "/api/v1/queues/%s/pause" % q)), (0, 1))
        a, b, c, whoami = self.two_nodes(api_key="corvo_k")
        self.assertEqual(len(whoami), 1, "the key's namespace is read once")
        c.pause_queue(q)
        self.assertEqual((self.count(a, "/api/v1/queues/%s/pause" % q), self.count(b, "/api/v1/queues/%s/pause" % q)), (0, 1))
        a, b, c, _ = self.two_nodes()
        c.pause_queue(q)
        self.assertEqual((self.count(a, "/api/v1/queues/%s/pause" % q), self.count(b, "/api/v1/queues/%s/pause" % q)), (1, 0))

    def test_placement_false_reads_no_placement_and_sends_everything_to_the_current_url(self) -> None:
        a, b, c, _ = self.two_nodes(placement=False)
        c.job("job_1_01HX")
        c.pause_queue(queue_on(1, 2, "p"))
        self.assertNotIn("/api/v1/jobs/job_1_01HX", b.paths())
        self.assertEqual(b.paths(), [])
        self.assertEqual(a.paths().count("/api/v1/cluster/status"), 1, "only discover() read the status")

    def test_a_worker_fetches_from_each_node_only_the_queues_it_leads_and_without_the_placement_every_queue_from_one(self) -> None:
        qa, qb, qa2 = queue_on(0, 2, "w"), queue_on(1, 2, "w"), queue_on(0, 2, "x")
        # 8 slots: 4 a node; 7: under SLOTS_PER_GROUP a node, one group.
        for placement, slots in ((True, 8), (False, 8), (True, 7)):
            grouped = placement and slots >= 8
            a, b, c, _ = self.two_nodes(placement=placement)
            w = Worker(c, concurrency=slots, fetch_timeout=1, handle_signals=False)
            for q in (qa, qb, qa2):
                w.register(q, lambda j, ctx: None)
            t = threading.Thread(target=w.run)
            t.start()
            try:
                if grouped:
                    until("a fetch on each node", lambda: self.count(a, "/api/v1/fetch") >= 3 and self.count(b, "/api/v1/fetch") >= 3)
                else:
                    until("fetches", lambda: self.count(a, "/api/v1/fetch") >= 3)
            finally:
                w.stop()
                t.join(10)
            self.assertFalse(t.is_alive(), "the worker did not drain")
            fa = [r.body for r in list(a.seen) if r.path == "/api/v1/fetch"]
            fb = [r.body for r in list(b.seen) if r.path == "/api/v1/fetch"]
            if grouped:
                # A poller a node, each holding one slot while its node has nothing.
                self.assertEqual({(tuple(f["queues"]), f["count"]) for f in fa}, {((qa, qa2), 1)})
                self.assertEqual({(tuple(f["queues"]), f["count"]) for f in fb}, {((qb,), 1)})
            else:
                # As on one node: one fetch loop, every queue, every free slot.
                self.assertEqual({(tuple(f["queues"]), f["count"]) for f in fa}, {((qa, qb, qa2), slots)})
                self.assertEqual(fb, [])

    def test_a_running_worker_groups_its_queues_again_when_their_nodes_change(self) -> None:
        a, b, c, _ = self.two_nodes()
        qa, qb = queue_on(0, 2, "g"), queue_on(1, 2, "g")
        w = Worker(c, concurrency=8, fetch_timeout=1, handle_signals=False)
        for q in (qa, qb):
            w.register(q, lambda j, ctx: None)
        t = threading.Thread(target=w.run)
        t.start()
        try:
            until("a fetch on each node", lambda: self.count(a, "/api/v1/fetch") > 0 and self.count(b, "/api/v1/fetch") > 0)
            # Shard 1's leader moves to a: one group, fetched from a as on
            # one node (every queue, every free slot).
            p = c._place
            assert p is not None
            c._place = type(p)(p.ns, [p.hosts[0], p.hosts[0]])
            until(
                "a fetch of both queues on a",
                lambda: any(r.body["queues"] == [qa, qb] and r.body["count"] == 8 for r in list(a.seen) if r.path == "/api/v1/fetch"),
                10,
            )
            nb = self.count(b, "/api/v1/fetch")
            time.sleep(0.2)
            self.assertEqual(self.count(b, "/api/v1/fetch"), nb, "b's poller still fetches")
        finally:
            w.stop()
            t.join(10)
        self.assertFalse(t.is_alive(), "the worker did not drain")

    def test_coalesced_enqueues_go_as_one_batch_per_node(self) -> None:
        hold = threading.Event()
        self.addCleanup(hold.set)
        batches: Dict[str, List[List[str]]] = {"a": [], "b": []}

        def node(name: str) -> Callable[[Req, int], Optional[Dict[str, Any]]]:
            def route(r: Req, n: int) -> Optional[Dict[str, Any]]:
                if r.path == "/api/v1/cluster/status":
                    return status(2, [(1, a.url[7:]), (2, b.url[7:])], [[1], [2]])
                if r.path == "/api/v1/enqueue":
                    hold.wait(10)  # the two lone calls stay in flight while the others gather
                    return {"status": 201, "body": {"job_id": "job_x_%s" % r.body["payload"], "status": "pending", "unique_existing": False}}
                if r.path == "/api/v1/enqueue/batch":
                    batches[name].append([j["queue"] for j in r.body["jobs"]])
                    return {"status": 201, "body": {"job_ids": ["job_x_%s" % j["payload"] for j in r.body["jobs"]]}}
                return None

            return route

        a = self.fake(node("a"))
        b = self.fake(node("b"))
        c = self.client(a.url)
        c.discover()
        qa, qb = queue_on(0, 2, "c"), queue_on(1, 2, "c")
        out: Dict[int, Any] = {}

        def enqueue(i: int, q: str) -> None:
            out[i] = c.enqueue(q, i)["job_id"]

        threads = [threading.Thread(target=enqueue, args=(i, qa if i % 2 else qb)) for i in range(2)]
        for t in threads:
            t.start()
        until("the two lone enqueues in flight", lambda: self.count(a, "/api/v1/enqueue") + self.count(b, "/api/v1/enqueue") == 2)
        more = [threading.Thread(target=enqueue, args=(i, qa if i % 2 else qb)) for i in range(2, 10)]
        for t in more:
            t.start()
        until("the other calls waiting", lambda: len(c._waiting) == 8)
        hold.set()
        for t in threads + more:
            t.join(10)
        self.assertEqual(out, {i: "job_x_%d" % i for i in range(10)})
        self.assertEqual(batches, {"a": [[qa] * 4], "b": [[qb] * 4]}, "not one batch per node")


def queues_of(prefix: str, shards: int) -> List[str]:
    """One queue per shard: queues_of(p, n)[i] lives on shard i."""
    return [queue_on(i, shards, prefix) for i in range(shards)]


def start_spread_cluster(t: unittest.TestCase) -> List[str]:
    """A 3-node cluster of 6 shards on one node each (--replicas 1), two led
    by each node, once settled; its nodes' URLs. Stopped when t ends."""
    env = {"CORVO_CLUSTER_SECRET": TEST_CLUSTER_SECRET}
    nodes: List[Server] = []
    t.addCleanup(lambda: [n.stop() for n in nodes])
    nodes.append(Server(["--node-id", "a", "--replicas", "1", "--shards", "6"], env))
    join = nodes[0].url[len("http://") :]
    nodes.append(Server(["--node-id", "b", "--join", join], env))
    nodes.append(Server(["--node-id", "c", "--join", join], env))
    admin = Client(nodes[0].url, placement=False)
    t.addCleanup(admin.close)

    def spread() -> bool:
        st = admin.cluster_status()
        return (
            len(st["nodes"]) == 3
            and len(st["shards"]) == 6
            and all(n["status"] == "up" and len(n["leader_of"]) == 2 for n in st["nodes"])
            and all(
                sh["leader_node"] != 0 and sh["placed_nodes"] == [sh["leader_node"]] and sh.get("settled") is True
                for sh in st["shards"]
            )
        )

    until("the shards to spread over the nodes", spread, 180)
    return [n.url for n in nodes]


class TestCluster(unittest.TestCase):
    def test_on_a_real_3_node_cluster_a_client_that_knows_the_placement_has_no_enqueue_ack_or_job_read_forwarded(self) -> None:
        # A worker over queues on every node gets every job exactly once,
        # fetching from each node only the queues it leads.
        urls = start_spread_cluster(self)
        per_queue = 20

        def load(c: Client, queues: List[str]) -> List[str]:
            # 8 threads enqueueing at once: their calls coalesce.
            ids: List[str] = []
            lock = threading.Lock()

            def producer(g: int) -> None:
                for i in range(g, per_queue * len(queues), 8):
                    jid = c.enqueue(queues[i % len(queues)], {"i": i})["job_id"]
                    with lock:
                        ids.append(jid)

            ts = [threading.Thread(target=producer, args=(g,)) for g in range(8)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(60)
            return ids

        # Without the placement, through one node: enqueues are forwarded.
        off = Client(urls[0], placement=False)
        self.addCleanup(off.close)
        off_counts = count_forwarded(off)
        self.assertEqual(len(load(off, queues_of("plain", 6))), per_queue * 6)
        self.assertGreater(
            off_counts["forwarded"].get("/api/v1/enqueue", 0) + off_counts["forwarded"].get("/api/v1/enqueue/batch", 0), 0, off_counts
        )

        c = Client(urls[0])
        self.addCleanup(c.close)
        on = count_forwarded(c)
        fetches = record_fetches(c)
        c.discover()
        queues = queues_of("place", 6)
        want = set()
        for q in queues:
            want.add(c.enqueue(q, {"alone": 1})["job_id"])
        want.update(load(c, queues))
        self.assertEqual(len(want), per_queue * len(queues) + len(queues))

        seen: Dict[str, int] = {}
        lock = threading.Lock()

        def handler(j: Any, ctx: Any) -> None:
            with lock:
                seen[j["job_id"]] = seen.get(j["job_id"], 0) + 1

        w = Worker(c, concurrency=12, fetch_timeout=2, handle_signals=False)  # 4 slots a node: a poller each
        for q in queues:
            w.register(q, handler)
        t = threading.Thread(target=w.run)
        t.start()
        try:
            until("the worker to handle every job", lambda: len(seen) == len(want), 60)
        finally:
            w.stop()
            t.join(30)
        self.assertFalse(t.is_alive(), "the worker did not drain")
        for jid, n in seen.items():
            self.assertEqual(n, 1, "job %s handled %d times" % (jid, n))
        self.assertEqual(set(seen), want)
        for jid in want:
            j = until("job %s completed" % jid, lambda: (lambda j: j if j["state"] == "completed" else None)(c.job(jid)))
            self.assertEqual(j["attempt"], 1)
        for route in ("/api/v1/enqueue", "/api/v1/enqueue/batch", "/api/v1/ack/{id}", "/api/v1/jobs/{id}"):
            self.assertEqual(on["forwarded"].get(route, 0), 0, "%s forwarded: %s" % (route, on))
        self.assertGreater(on["total"].get("/api/v1/enqueue/batch", 0), 0, "no coalesced batch: %s" % on["total"])
        self.assertGreater(on["total"].get("/api/v1/ack/{id}", 0) + on["total"].get("/api/v1/ack/batch", 0), 0, "no ack")
        # The worker fetched from each node apart: every fetch, and every
        # fetch an ack carried, named only queues of the node it went to.
        p = c._place
        assert p is not None
        self.assertTrue(fetches, "no fetch seen")
        for node, fq in fetches:
            for q in fq:
                leader = p.hosts[shard_for_queue(stored_queue(p.ns, q), 6)][0].url
                self.assertEqual(leader, node, "a fetch sent to %s named %s, on %s: %s" % (node, q, leader, fq))

    def test_a_worker_over_queues_on_two_nodes_shares_its_slots_between_them(self) -> None:
        # While one node's backlog holds every slot but the one the other
        # node's poller waits with, a backlog arriving on the other node gets
        # its share (a slot that finished a job gives its slot back for that
        # poller when its node holds more than its share), instead of one
        # slot until the first backlog is done.
        urls = start_spread_cluster(self)
        c = Client(urls[0])
        self.addCleanup(c.close)
        c.discover()
        # Two queues whose shards two different nodes lead.
        queues: List[str] = []
        nodes: List[str] = []
        i = 0
        while len(queues) < 2:
            q = "share.q%d" % i
            r = c._route_queue(q)
            assert r
            if not nodes or r[0].url != nodes[0]:
                queues.append(q)
                nodes.append(r[0].url)
            i += 1

        def enqueue(q: str, n: int) -> None:
            c.enqueue_batch([{"queue": q, "payload": {"i": i}} for i in range(n)])

        settled, measured = 30, 150
        enqueue(queues[0], 400)
        lock = threading.Lock()
        order: List[str] = []
        busy, done = threading.Event(), threading.Event()
        start = [0]  # where the second backlog's measure starts

        def handler(j: Any, ctx: Any) -> None:
            # A job that takes a while: the slots stay busy, so the backlog
            # that took them first would keep them.
            ctx.wait(0.002)
            with lock:
                order.append(j["queue"])
                if len(order) == settled:
                    busy.set()
                if start[0] > 0 and len(order) == start[0] + measured:
                    done.set()

        w = Worker(c, concurrency=8, fetch_timeout=2, handle_signals=False)
        for q in queues:
            w.register(q, handler)
        t = threading.Thread(target=w.run)
        t.start()
        try:
            self.assertTrue(busy.wait(60), "the worker never took the first backlog")
            enqueue(queues[1], 200)
            with lock:
                start[0] = len(order)
            self.assertTrue(done.wait(60), "the worker never handled the jobs measured")
        finally:
            w.stop()
            t.join(30)
        self.assertFalse(t.is_alive(), "the worker did not drain")
        with lock:
            got = order[start[0] : start[0] + measured]
        n = {q: got.count(q) for q in queues}
        # Its share is half the slots; one slot of eight would give it ~12 %.
        self.assertGreaterEqual(
            n[queues[1]],
            measured * 3 // 10,
            "of the %d jobs handled once %s had a backlog too, it had %d (under 30%%): %s" % (measured, queues[1], n[queues[1]], n),
        )


def record_fetches(c: Client) -> List[Tuple[str, List[str]]]:
    """Records every fetch the client's transport sends (a fetch's, or the
    next one an ack or an ack batch carries): the node it went to and the
    queues it named."""
    seen: List[Tuple[str, List[str]]] = []
    lock = threading.Lock()
    request = c._transport.request

    def recording(base: Any, method: str, path: str, payload: Any, *args: Any, **kw: Any) -> Any:
        route = path.split("?")[0]
        if payload and (route == "/api/v1/fetch" or route.startswith("/api/v1/ack/")):
            body = json.loads(payload)
            queues = (body.get("fetch") or {}).get("queues") if "fetch" in body else body.get("queues")
            if queues:
                with lock:
                    seen.append((base.url, list(queues)))
        return request(base, method, path, payload, *args, **kw)

    c._transport.request = recording  # type: ignore[method-assign]
    return seen


def count_forwarded(c: Client) -> Dict[str, Dict[str, int]]:
    """Counts, by route, every answer the client's transport reads and those
    a node gave after forwarding the request (X-Corvo-Forwarded)."""
    counts: Dict[str, Dict[str, int]] = {"forwarded": {}, "total": {}}
    lock = threading.Lock()
    request = c._transport.request

    def counting(base: Any, method: str, path: str, *args: Any, **kw: Any) -> Any:
        a = request(base, method, path, *args, **kw)
        route = path.split("?")[0]
        if route.startswith("/api/v1/ack/") and route != "/api/v1/ack/batch":
            route = "/api/v1/ack/{id}"
        if route.startswith("/api/v1/jobs/"):
            route = "/api/v1/jobs/{id}"
        with lock:
            counts["total"][route] = counts["total"].get(route, 0) + 1
            if FORWARDED_HEADER.lower() in a.headers:
                counts["forwarded"][route] = counts["forwarded"].get(route, 0) + 1
        return a

    c._transport.request = counting  # type: ignore[method-assign]
    return counts


if __name__ == "__main__":
    unittest.main()
