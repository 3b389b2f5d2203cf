// A slot holds its next job after a quick handler (as the Go SDK's
// TestWorkerHoldsOnlyAfterQuickHandlers and
// TestWorkerGivesBackAHeldJobWhenDraining), against a real server.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Client, Worker } from "../dist/index.js";
import { startServer, waitState } from "./server.mjs";

let server;
before(async () => {
  server = await startServer();
});
after(async () => {
  await server?.stop();
});

/**
 * Enqueues three jobs on queue and runs a one-slot worker whose handler
 * blocks on the second job; calls during(ids) while it does, then lets it
 * finish. stopFirst: the worker is stopped before the second job ends.
 */
async function whileSecondRuns(queue, opts, during, stopFirst = false) {
  const c = new Client(server.url);
  const ids = [];
  for (let i = 0; i < 3; i++) ids.push((await c.enqueue({ queue, payload: { n: i } })).job_id);
  let second;
  const secondStarted = new Promise((r) => (second = r));
  let release;
  const released = new Promise((r) => (release = r));
  const ran = new Set();
  const w = new Worker(c, { concurrency: 1, fetchTimeoutMs: 1000, handleSignals: false, ...opts });
  w.register(queue, async (job) => {
    ran.add(job.job_id);
    if (job.job_id === ids[1]) {
      second();
      await released;
    }
  });
  const done = w.run();
  await secondStarted;
  try {
    await during(c, ids);
  } finally {
    if (stopFirst) w.stop();
    release();
  }
  if (!stopFirst) {
    for (const id of ids) await waitState(c, id, "completed");
    w.stop();
  }
  await done;
  return { c, ids, ran };
}

for (const [name, opts, third] of [
  // 1 s: held for up to 4 s while the second runs, so the check never
  // races the give-back (the test after these).
  ["holding", { prefetchUnderMs: 1000 }, "active"],
  ["off", { prefetchUnderMs: -1 }, "pending"],
]) {
  test(`a slot holds the job after its next one: ${name}`, async () => {
    await whileSecondRuns(`ts.hold.${name}`, opts, async (c, ids) => {
      const doc = await c.job(ids[2]);
      assert.equal(doc.state, third, `the third job while the second runs`);
    });
  });
}

test("a job held behind a handler that runs past 4×prefetchUnderMs is given back while it runs", async () => {
  const { c, ids, ran } = await whileSecondRuns("ts.hold.slow", {}, async (c, ids) => {
    const doc = await waitState(c, ids[2], "pending");
    assert.equal(doc.attempt, 0, "its attempt not counted");
    assert.deepEqual(doc.errors ?? [], [], "no error recorded");
  });
  assert.ok(ran.has(ids[2]), "the job given back never ran");
  assert.equal((await c.job(ids[2])).attempt, 1, "run at its first attempt");
});

test("a job held when the drain begins is given back, never started", async () => {
  const { c, ids, ran } = await whileSecondRuns(
    "ts.hold.drain",
    { prefetchUnderMs: 1000 },
    async (c, ids) => assert.equal((await c.job(ids[2])).state, "active", "held"),
    true,
  );
  assert.ok(!ran.has(ids[2]), "the held job ran after the drain began");
  await waitState(c, ids[1], "completed");
  const doc = await c.job(ids[2]);
  // Given back unstarted: pending at once, its attempt not counted, no error (an unclaim, not a fail).
  assert.equal(doc.state, "pending", "held job after the drain");
  assert.equal(doc.attempt, 0, "its attempt not counted");
  assert.deepEqual(doc.errors ?? [], [], "no error recorded");
});

test("a job held when the drain's grace ends is given back, the running one failed", async () => {
  const c = new Client(server.url);
  const queue = "ts.hold.grace";
  const ids = [];
  for (let i = 0; i < 3; i++) ids.push((await c.enqueue({ queue, payload: { n: i } })).job_id);
  let second;
  const secondStarted = new Promise((r) => (second = r));
  const ran = new Set();
  // prefetchUnderMs 1000: the third job is held behind the second for up to 4 s, far past the grace.
  const w = new Worker(c, { concurrency: 1, fetchTimeoutMs: 1000, handleSignals: false, prefetchUnderMs: 1000, shutdownGraceMs: 100 });
  w.register(queue, async (job, ctx) => {
    ran.add(job.job_id);
    if (job.job_id === ids[1]) {
      second();
      // Runs until the grace ends.
      await new Promise((r) => ctx.signal.addEventListener("abort", r));
      throw ctx.signal.reason;
    }
  });
  const done = w.run();
  await secondStarted;
  assert.equal((await c.job(ids[2])).state, "active", "the third job is held while the second runs");
  w.stop();
  await done;
  assert.ok(!ran.has(ids[2]), "the held job started during the drain");
  const running = await c.job(ids[1]);
  assert.equal(running.attempt, 1);
  assert.deepEqual(
    running.errors.map((e) => e.error),
    ["worker_shutdown"],
    "the job running at the grace's end is failed",
  );
  const held = await c.job(ids[2]);
  assert.equal(held.state, "pending", "held job at the grace's end");
  assert.equal(held.attempt, 0, "its attempt not counted");
  assert.deepEqual(held.errors ?? [], [], "no error recorded");
});
