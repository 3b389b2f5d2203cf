"""A slot holds its next job after a quick handler (prefetch_under), as the
Go SDK's TestWorkerHoldsOnlyAfterQuickHandlers and
TestWorkerGivesBackAHeldJobWhenDraining and the TypeScript SDK's
test/hold.test.mjs, against a real server."""

from __future__ import annotations

import threading
import unittest
from typing import Any, Callable, Dict, List, Set, Tuple

from _server import ServerCase, wait_state

from corvo import Client, Worker


class TestHold(ServerCase):

    def while_second_runs(
        self, queue: str, kw: Dict[str, Any], during: Callable[[Client, List[str]], None], stop_first: bool = False
    ) -> Tuple[Client, List[str], Set[str]]:
        """Enqueues three jobs on queue and runs a one-slot worker whose
        handler blocks on the second job; calls during(client, ids) while it
        does, then lets it finish. stop_first: the worker is stopped before
        the second job ends."""
        c = Client(self.server.url)
        self.addCleanup(c.close)
        ids = [c.enqueue(queue, {"n": i})["job_id"] for i in range(3)]
        second, release = threading.Event(), threading.Event()
        self.addCleanup(release.set)
        ran: Set[str] = set()

        def handler(job: Any, ctx: Any) -> None:
            ran.add(job["job_id"])
            if job["job_id"] == ids[1]:
                second.set()
                release.wait(30)

        w = Worker(c, concurrency=1, fetch_timeout=1, handle_signals=False, **kw)
        w.register(queue, handler)
        t = threading.Thread(target=w.run, daemon=True)
        t.start()
        self.assertTrue(second.wait(20), "the second job never started")
        try:
            during(c, ids)
        finally:
            if stop_first:
                w.stop()
            release.set()
        if not stop_first:
            for jid in ids:
                wait_state(c, jid, "completed")
            w.stop()
        t.join(30)
        self.assertFalse(t.is_alive(), "the worker did not stop")
        return c, ids, ran

    def test_a_slot_holds_the_job_after_its_next_one_unless_off(self) -> None:
        # 1 s: held for up to 4 s while the second runs, so the check never
        # races the give-back (the test after this one).
        for name, kw, third in (("holding", {"prefetch_under": 1.0}, "active"), ("off", {"prefetch_under": -1}, "pending")):
            with self.subTest(name):

                def during(c: Client, ids: List[str]) -> None:
                    self.assertEqual(c.job(ids[2])["state"], third, "the third job while the second runs")

                self.while_second_runs("py.hold." + name, kw, during)

    def test_a_job_held_behind_a_handler_past_4x_prefetch_under_is_given_back_while_it_runs(self) -> None:
        def during(c: Client, ids: List[str]) -> None:
            doc = wait_state(c, ids[2], "pending")
            self.assertEqual(doc["attempt"], 0, "its attempt not counted")
            self.assertFalse(doc.get("errors"), "no error recorded")

        c, ids, ran = self.while_second_runs("py.hold.slow", {}, during)
        self.assertIn(ids[2], ran, "the job given back never ran")
        self.assertEqual(c.job(ids[2])["attempt"], 1, "run at its first attempt")

    def test_a_job_held_when_the_drain_begins_is_given_back_never_started(self) -> None:
        def during(c: Client, ids: List[str]) -> None:
            self.assertEqual(c.job(ids[2])["state"], "active", "held")

        c, ids, ran = self.while_second_runs("py.hold.drain", {"prefetch_under": 1.0}, during, stop_first=True)
        self.assertNotIn(ids[2], ran, "the held job ran after the drain began")
        wait_state(c, ids[1], "completed")
        # Given back unstarted: pending at once, its attempt not counted, no
        # error (an unclaim, not a fail).
        doc = c.job(ids[2])
        self.assertEqual(doc["state"], "pending", "held job after the drain")
        self.assertEqual(doc["attempt"], 0, "its attempt not counted")
        self.assertFalse(doc.get("errors"), "no error recorded")


    def test_a_job_held_when_the_drains_grace_ends_is_given_back_the_running_one_failed(self) -> None:
        c = Client(self.server.url)
        self.addCleanup(c.close)
        queue = "py.hold.grace"
        ids = [c.enqueue(queue, {"n": i})["job_id"] for i in range(3)]
        second = threading.Event()
        ran: Set[str] = set()

        def handler(job: Any, ctx: Any) -> None:
            ran.add(job["job_id"])
            if job["job_id"] == ids[1]:
                second.set()
                ctx.wait(30)  # runs until the grace ends
                ctx.raise_if_cancelled()

        # prefetch_under 1 s: the third job is held behind the second for up
        # to 4 s, far past the grace.
        w = Worker(c, concurrency=1, fetch_timeout=1, handle_signals=False, prefetch_under=1.0, shutdown_grace=0.1)
        w.register(queue, handler)
        t = threading.Thread(target=w.run, daemon=True)
        t.start()
        self.assertTrue(second.wait(20), "the second job never started")
        self.assertEqual(c.job(ids[2])["state"], "active", "the third job is held while the second runs")
        w.stop()
        t.join(30)
        self.assertFalse(t.is_alive(), "the worker did not stop")
        self.assertNotIn(ids[2], ran, "the held job started during the drain")
        running = c.job(ids[1])
        self.assertEqual(running["attempt"], 1)
        self.assertEqual([e["error"] for e in running["errors"]], ["worker_shutdown"], "the job running at the grace's end is failed")
        held = c.job(ids[2])
        self.assertEqual(held["state"], "pending", "held job at the grace's end")
        self.assertEqual(held["attempt"], 0, "its attempt not counted")
        self.assertFalse(held.get("errors"), "no error recorded")

if __name__ == "__main__":
    unittest.main()
