"""LLM work against a real server (as the Go SDK's usage_test.go): the usage
a handler reports sums exactly in the job, a per-job budget reaches the
handler through a heartbeat, a reject budget's 429 is not retried, and a
provider error moves a routed job to its next model."""

from __future__ import annotations

import threading
import unittest
from typing import Any, Callable, Dict, List

from _server import ServerCase, until, wait_state

from corvo import BudgetExceeded, Client, CorvoError, ErrorCodes, ProviderError, Worker


class TestLLM(ServerCase):
    SERVER_ARGS = ["--strict-leases"]

    def client(self) -> Client:
        c = Client(self.server.url)
        self.addCleanup(c.close)
        return c

    def run_worker(self, c: Client, queue: str, handler: Callable[[Any, Any], Any], **kw: Any) -> None:
        """Runs a worker for one queue until the test ends."""
        w = Worker(c, concurrency=1, fetch_timeout=1, heartbeat_interval=0.05, handle_signals=False, **kw)
        w.register(queue, handler)
        t = threading.Thread(target=w.run)
        t.start()

        def stop() -> None:
            w.stop()
            t.join(30)

        self.addCleanup(stop)

    def test_usage_reported_by_a_handler_sums_exactly_in_the_job(self) -> None:
        c = self.client()
        en = c.enqueue("py.llm", {"q": "capital of France"})
        got: Dict[str, Any] = {}

        def handler(job: Any, ctx: Any) -> Any:
            ctx.report_usage(input_tokens=1000, output_tokens=100, model="fake-large", provider="fake", cost_usd=0.011, latency_ms=800)
            ctx.report_usage(input_tokens=500, output_tokens=50, cache_read_tokens=400, model="fake-large", provider="fake", cost_usd=0.0055)
            # Until a heartbeat has carried the running total.
            until("the heartbeat's usage", lambda: (c.job(job["job_id"]).get("usage") or {}).get("input_tokens") == 1500)
            ctx.report_usage(input_tokens=70, output_tokens=7, model="fake-large", provider="fake", cost_usd=0.00077)
            got["usage"] = ctx.usage
            return {"answer": "Paris"}

        self.run_worker(c, "py.llm", handler)
        doc = wait_state(c, en["job_id"], "completed")
        u = doc["usage"]
        self.assertEqual([u["input_tokens"], u["output_tokens"], u["cache_read_tokens"], u["cost_usd"]], [1570, 157, 400, 0.01727])
        self.assertEqual(
            [[r["attempt"], r["phase"], r["input_tokens"], r["cost_usd"], r["model"]] for r in u["reports"]],
            [[1, "heartbeat", 1500, 0.0165, "fake-large"], [1, "ack", 70, 0.00077, "fake-large"]],
        )
        self.assertEqual(got["usage"]["input_tokens"], 1570)

    def test_a_per_job_budget_cancels_the_handler_on_the_next_heartbeat_or_only_flags_it(self) -> None:
        c = self.client()
        for q in ("py.budget", "py.budget.go-on"):
            c.set_budget("queue:" + q, per_job_usd=0.01)
        self.assertEqual(
            sorted((b["scope"], b["per_job_usd"], b["daily_usd"], b["on_exceed"]) for b in c.budgets()),
            [("queue:py.budget", 0.01, None, "hold"), ("queue:py.budget.go-on", 0.01, None, "hold")],
        )
        stopped = c.enqueue("py.budget", max_retries=1)
        got: Dict[str, Any] = {}

        def handler(job: Any, ctx: Any) -> Any:
            ctx.report_usage(input_tokens=10, cost_usd=0.02)
            ctx.wait(20)  # the next heartbeat carries the usage, and hears the budget
            got["reason"] = ctx.reason
            ctx.raise_if_cancelled()

        def go_on(job: Any, ctx: Any) -> Any:
            ctx.report_usage(input_tokens=10, cost_usd=0.02)
            until("budget_exceeded", lambda: ctx.budget_exceeded)
            got["cancelled"] = ctx.cancelled
            return "done anyway"

        go = c.enqueue("py.budget.go-on")
        self.run_worker(c, "py.budget", handler)
        self.run_worker(c, "py.budget.go-on", go_on, continue_over_budget=True)
        dead = wait_state(c, stopped["job_id"], "dead")
        self.assertIsInstance(got["reason"], BudgetExceeded)
        self.assertEqual(dead["last_error"], "corvo: job budget exceeded")
        self.assertEqual(dead["usage"]["cost_usd"], 0.02, "the fail carried nothing the heartbeat had not")
        done = wait_state(c, go["job_id"], "completed")
        self.assertEqual(done["result"], "done anyway")
        self.assertFalse(got["cancelled"])

        # A reject budget whose day is spent: the enqueue's 429 comes at once, not retried.
        c.set_budget("queue:py.budget.reject", daily_usd=0.01, on_exceed="reject")
        spender = c.enqueue("py.budget.reject")
        (j,) = c.fetch(["py.budget.reject"], worker_id="py-manual", timeout=5, count=1)
        self.assertEqual(j["job_id"], spender["job_id"])
        c.ack(j["job_id"], worker_id="py-manual", attempt=j["attempt"], usage={"input_tokens": 1, "cost_usd": 0.01})
        until("the budget's day spent", lambda: any(b["scope"] == "queue:py.budget.reject" and b["exceeded"] for b in c.budgets()))
        with self.assertRaises(CorvoError) as cm:
            c.enqueue("py.budget.reject")
        self.assertEqual((cm.exception.status, cm.exception.code), (429, ErrorCodes.BUDGET_EXCEEDED))
        c.delete_budget("queue:py.budget.reject")
        self.assertFalse(any(b["scope"] == "queue:py.budget.reject" for b in c.budgets()))

    def test_a_provider_error_moves_a_routed_job_to_its_next_model_without_using_a_retry(self) -> None:
        c = self.client()
        en = c.enqueue("py.route", routing={"prefer": "big-model", "fallback": ["small-model"]}, max_retries=1)
        targets: List[Any] = []

        def handler(job: Any, ctx: Any) -> Any:
            r = job["routing"]
            targets.append((r["target"], r["index"]))
            if r["target"] == "big-model":
                raise ProviderError("HTTP 529 overloaded")
            ctx.report_usage(input_tokens=5, model=r["target"], cost_usd=0.001)
            return {"by": r["target"]}

        self.run_worker(c, "py.route", handler)
        doc = wait_state(c, en["job_id"], "completed")
        self.assertEqual(targets, [("big-model", 0), ("small-model", 1)])
        self.assertEqual(doc["result"], {"by": "small-model"})
        self.assertEqual((doc["routing"]["target"], doc["routing"]["fallbacks"], doc["routing"]["order"]), ("small-model", 1, ["big-model", "small-model"]))
        self.assertEqual(doc["usage"]["reports"][0]["model"], "small-model")


if __name__ == "__main__":
    unittest.main()
