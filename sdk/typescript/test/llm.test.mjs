// LLM work against a real server (as the Go SDK's usage_test.go): the
// usage a handler reports sums exactly in the job, a per-job budget
// reaches the handler through a heartbeat, a reject budget's 429 is not
// retried, and a provider error moves a routed job to its next model.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { BudgetExceededError, Client, CorvoError, ErrorCodes, ProviderError, Worker } from "../dist/index.js";
import { startServer, until, waitState } from "./server.mjs";

let server;
before(async () => {
  server = await startServer(["--strict-leases"]);
});
after(async () => {
  await server?.stop();
});

/** Runs a worker for one queue until the returned stop(). */
function runWorker(c, queue, handler, opts = {}) {
  const w = new Worker(c, { concurrency: 1, fetchTimeoutMs: 1000, heartbeatIntervalMs: 50, handleSignals: false, ...opts });
  w.register(queue, handler);
  const done = w.run();
  return async () => {
    w.stop();
    await done;
  };
}

test("usage reported by a handler travels on heartbeats and the ack, and the job's totals are exactly what it reported", { timeout: 60_000 }, async () => {
  const c = new Client(server.url);
  const en = await c.enqueue({ queue: "ts.llm", payload: { q: "capital of France" } });
  const stop = runWorker(c, "ts.llm", async (job, ctx) => {
    ctx.reportUsage({ input_tokens: 1000, output_tokens: 100, model: "fake-large", provider: "fake", cost_usd: 0.011, latency_ms: 800 });
    ctx.reportUsage({ input_tokens: 500, output_tokens: 50, cache_read_tokens: 400, model: "fake-large", provider: "fake", cost_usd: 0.0055 });
    // Until a heartbeat has carried the running total.
    await until("the heartbeat's usage", async () => (await c.job(job.job_id)).usage?.input_tokens === 1500);
    ctx.reportUsage({ input_tokens: 70, output_tokens: 7, model: "fake-large", provider: "fake", cost_usd: 0.00077 });
    assert.equal(ctx.usage.input_tokens, 1570);
    return { answer: "Paris" };
  });
  try {
    const doc = await waitState(c, en.job_id, "completed");
    const u = doc.usage;
    assert.deepEqual(
      [u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cost_usd],
      [1570, 157, 400, 0.01727],
    );
    assert.deepEqual(u.reports.map((r) => [r.attempt, r.phase, r.input_tokens, r.cost_usd, r.model]), [
      [1, "heartbeat", 1500, 0.0165, "fake-large"],
      [1, "ack", 70, 0.00077, "fake-large"],
    ]);
  } finally {
    await stop();
  }
});

test("a job past its per-job budget hears it on the next heartbeat: its signal aborts and the attempt fails with it, or with continueOverBudget it carries on", { timeout: 60_000 }, async () => {
  const c = new Client(server.url);
  for (const q of ["ts.budget", "ts.budget.go-on"]) await c.setBudget({ scope: `queue:${q}`, per_job_usd: 0.01 });
  const bs = await c.budgets();
  assert.deepEqual(
    bs.map((b) => [b.scope, b.per_job_usd, b.daily_usd, b.on_exceed]).sort(),
    [["queue:ts.budget", 0.01, null, "hold"], ["queue:ts.budget.go-on", 0.01, null, "hold"]],
  );

  const stopped = await c.enqueue({ queue: "ts.budget", max_retries: 1 });
  let reason;
  const stop1 = runWorker(c, "ts.budget", async (job, ctx) => {
    ctx.reportUsage({ input_tokens: 10, cost_usd: 0.02 });
    // The next heartbeat carries the usage, and hears the budget.
    await new Promise((_, reject) => ctx.signal.addEventListener("abort", () => reject((reason = ctx.signal.reason))));
  });
  const goOn = await c.enqueue({ queue: "ts.budget.go-on" });
  const stop2 = runWorker(
    c,
    "ts.budget.go-on",
    async (job, ctx) => {
      ctx.reportUsage({ input_tokens: 10, cost_usd: 0.02 });
      await until("budgetExceeded", () => ctx.budgetExceeded);
      assert.equal(ctx.signal.aborted, false);
      return "done anyway";
    },
    { continueOverBudget: true },
  );
  try {
    const dead = await waitState(c, stopped.job_id, "dead");
    assert.ok(reason instanceof BudgetExceededError);
    assert.equal(dead.last_error, "corvo: job budget exceeded");
    assert.equal(dead.usage.cost_usd, 0.02, "the fail carried nothing the heartbeat had not");
    const done = await waitState(c, goOn.job_id, "completed");
    assert.equal(done.result, "done anyway");
    assert.equal(done.usage.cost_usd, 0.02);
  } finally {
    await stop1();
    await stop2();
  }

  // A reject budget whose day is spent: the enqueue's 429 comes at once, not retried.
  await c.setBudget({ scope: "queue:ts.budget.reject", daily_usd: 0.01, on_exceed: "reject" });
  const spender = await c.enqueue({ queue: "ts.budget.reject" });
  const [j] = await c.fetch({ queues: ["ts.budget.reject"], worker_id: "ts-manual", timeout: 5 });
  assert.equal(j.job_id, spender.job_id);
  await c.ack(j.job_id, { worker_id: "ts-manual", attempt: j.attempt, usage: { input_tokens: 1, cost_usd: 0.01 } });
  await until("the budget's day spent", async () => (await c.budgets()).find((b) => b.scope === "queue:ts.budget.reject")?.exceeded);
  const err = await c.enqueue({ queue: "ts.budget.reject" }).then(() => null, (e) => e);
  assert.ok(err instanceof CorvoError);
  assert.equal(err.status, 429);
  assert.equal(err.code, ErrorCodes.BudgetExceeded);
  await c.deleteBudget("queue:ts.budget.reject");
  assert.equal((await c.budgets()).some((b) => b.scope === "queue:ts.budget.reject"), false);
});

test("a routed job's fetch names the model to call; a ProviderError moves it to the next one at once, without using a retry", { timeout: 60_000 }, async () => {
  const c = new Client(server.url);
  const en = await c.enqueue({ queue: "ts.route", routing: { prefer: "big-model", fallback: ["small-model"] }, max_retries: 1 });
  const targets = [];
  const stop = runWorker(c, "ts.route", (job, ctx) => {
    targets.push([job.attempt, job.routing?.target, job.routing?.index]);
    if (job.routing?.target === "big-model") throw new ProviderError("HTTP 529 overloaded");
    ctx.reportUsage({ input_tokens: 5, model: job.routing.target, cost_usd: 0.001 });
    return { by: job.routing.target };
  });
  try {
    const doc = await waitState(c, en.job_id, "completed");
    assert.deepEqual(targets.map(([, t, i]) => [t, i]), [["big-model", 0], ["small-model", 1]]);
    assert.deepEqual(doc.result, { by: "small-model" });
    assert.equal(doc.routing.target, "small-model");
    assert.equal(doc.routing.fallbacks, 1);
    assert.deepEqual(doc.routing.order, ["big-model", "small-model"]);
    assert.equal(doc.usage.reports[0].model, "small-model");
  } finally {
    await stop();
  }
});
