// The language-neutral conformance suite (sdk/conformance/scenarios.json),
// run by the TypeScript SDK against a real server: each scenario of the
// file has its implementation below, keyed by its id, and the test fails
// when one is missing (or when this file implements an id the list lacks).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { Client, ConflictError, CorvoError, JobCancelledError, NotFoundError, Worker, isConflict } from "../dist/index.js";
import { freeAddr, repoRoot, startServer, until, waitState } from "./server.mjs";

const suite = JSON.parse(readFileSync(join(repoRoot, "sdk/conformance/scenarios.json"), "utf8"));

/** Runs a worker until the returned stop() (which waits for run() to end). */
function runWorker(w) {
  const done = w.run();
  return async () => {
    w.stop();
    await done;
  };
}

async function fetchOne(c, queue, worker, timeout) {
  const jobs = await c.fetch({ queues: [queue], worker_id: worker, timeout });
  assert.equal(jobs.length, 1, `fetch ${queue}: ${jobs.length} jobs`);
  return jobs[0];
}

async function rejectsWith(p, status, code) {
  try {
    await p;
  } catch (err) {
    assert.ok(err instanceof CorvoError, `not a CorvoError: ${err}`);
    assert.equal(err.status, status, err.message);
    assert.equal(err.code, code, err.message);
    return err;
  }
  assert.fail(`want a ${status} ${code} error, got none`);
}

const scenarios = {
  async enqueue_fetch_ack({ c, q }) {
    const en = await c.enqueue({ queue: q, payload: { n: 7 }, priority: "high", max_retries: 4, tags: { tenant: "acme" } });
    assert.equal(en.status, "pending");
    assert.ok(en.job_id);
    const j = await fetchOne(c, q, "ts-w", 5);
    assert.equal(j.job_id, en.job_id);
    assert.equal(j.attempt, 1);
    assert.deepEqual(j.payload, { n: 7 });
    assert.equal(j.priority, "high");
    assert.equal(j.max_retries, 4);
    assert.deepEqual(j.tags, { tenant: "acme" });
    assert.ok(j.lease_expires_at);
    await c.ack(j.job_id, { result: { ok: true }, worker_id: "ts-w", attempt: j.attempt });
    const doc = await c.job(j.job_id);
    assert.equal(doc.state, "completed");
    assert.deepEqual(doc.result, { ok: true });
    assert.equal(doc.attempt, 1);
    assert.deepEqual(await c.fetch({ queues: [q], worker_id: "ts-w" }), []);
  },

  async ack_and_fetch({ c, q }) {
    const ids = [];
    for (let i = 0; i < 4; i++) ids.push((await c.enqueue({ queue: q, payload: i })).job_id);
    const w = "ts-af";
    const first = await fetchOne(c, q, w, 5);
    const out = await c.ackAndFetch(first.job_id, { worker_id: w, attempt: first.attempt }, { queues: [q], worker_id: w, count: 1 });
    assert.equal(out.status, "completed");
    assert.equal(out.jobs.length, 1);
    assert.notEqual(out.jobs[0].job_id, first.job_id);
    const second = out.jobs[0];
    const res = await c.ackBatchAndFetch([{ job_id: second.job_id, worker_id: w, attempt: second.attempt }], { queues: [q], worker_id: w, count: 2 });
    assert.equal(res.acked, 1);
    assert.deepEqual(res.errors, []);
    assert.equal(res.jobs.length, 2);
    const all = await c.ackBatch(res.jobs.map((j) => ({ job_id: j.job_id, worker_id: w, attempt: j.attempt })));
    assert.equal(all.acked, 2);
    assert.deepEqual(all.errors, []);
    for (const id of ids) assert.equal((await c.job(id)).state, "completed");
  },

  async fail_retry_backoff({ c, q }) {
    const en = await c.enqueue({ queue: q, max_retries: 2, retry_backoff: "fixed", retry_base_delay: "1s" });
    let j = await fetchOne(c, q, "ts-w", 5);
    const before = Date.now();
    let fr = await c.fail(j.job_id, { error: "smtp timeout", backtrace: "at send()", worker_id: "ts-w", attempt: j.attempt });
    assert.equal(fr.status, "retrying");
    assert.equal(fr.attempts_remaining, 1);
    assert.ok(Date.parse(fr.next_attempt_at) >= before + 1000 - 50, `next attempt at ${fr.next_attempt_at}, failed at ${new Date(before).toISOString()}`);
    const doc = await c.job(en.job_id);
    assert.equal(doc.state, "retrying");
    assert.equal(doc.last_error, "smtp timeout");
    assert.deepEqual(await c.fetch({ queues: [q], worker_id: "ts-w" }), [], "fetched a job before its backoff ran out");
    j = await fetchOne(c, q, "ts-w", 10);
    assert.equal(j.job_id, en.job_id);
    assert.equal(j.attempt, 2);
    fr = await c.fail(j.job_id, { error: "smtp timeout", worker_id: "ts-w", attempt: j.attempt });
    assert.equal(fr.status, "dead");
    assert.equal(fr.attempts_remaining, 0);
    const dead = await c.job(en.job_id);
    assert.equal(dead.state, "dead");
    assert.equal(dead.errors.length, 2);
  },

  async heartbeat_progress_cancel({ c, q }) {
    const en = await c.enqueue({ queue: q });
    const progress = { current: 3, total: 10 };
    const w = new Worker(c, { concurrency: 1, fetchTimeoutMs: 1000, heartbeatIntervalMs: 100, handleSignals: false });
    let reason;
    const ended = new Promise((resolve) => {
      w.register(q, async (job, ctx) => {
        ctx.progress(progress);
        await new Promise((r) => ctx.signal.addEventListener("abort", r, { once: true }));
        reason = ctx.signal.reason;
        resolve();
        throw ctx.signal.reason;
      });
    });
    const stop = runWorker(w);
    try {
      await until("the progress", async () => {
        const doc = await c.job(en.job_id);
        return doc.progress && doc.progress.current === 3 && doc.progress.total === 10;
      });
      assert.equal(await c.cancel(en.job_id), "cancelling");
      await ended;
      assert.ok(reason instanceof JobCancelledError, `the signal's reason: ${reason}`);
      await waitState(c, en.job_id, "cancelled");
    } finally {
      await stop();
    }
  },

  async checkpoint_survives_drain({ c, q }) {
    const en = await c.enqueue({ queue: q, retry_backoff: "none", max_retries: 5 });
    const checkpoint = { offset: 47000 };
    const w = new Worker(c, { concurrency: 1, fetchTimeoutMs: 1000, shutdownGraceMs: 300, handleSignals: false });
    let stored;
    const checkpointed = new Promise((r) => (stored = r));
    w.register(q, async (job, ctx) => {
      await ctx.checkpoint(checkpoint);
      stored();
      await new Promise((r) => ctx.signal.addEventListener("abort", r, { once: true }));
      throw ctx.signal.reason;
    });
    const stop = runWorker(w);
    await checkpointed;
    await stop(); // what SIGTERM does
    const doc = await c.job(en.job_id);
    assert.equal(doc.state, "pending");
    assert.deepEqual(doc.errors.map((e) => e.error), ["worker_shutdown"]);
    const j = await fetchOne(c, q, "ts-w", 5);
    assert.equal(j.job_id, en.job_id);
    assert.equal(j.attempt, 2);
    assert.deepEqual(j.checkpoint, checkpoint);
    await c.ack(j.job_id, { worker_id: "ts-w", attempt: j.attempt });
  },

  async lease_reclaim_stale_ack({ c, q }) {
    const en = await c.enqueue({ queue: q, lease_duration: 1, retry_backoff: "none" });
    const a = await fetchOne(c, q, "ts-a", 5);
    const b = await fetchOne(c, q, "ts-b", 15);
    assert.deepEqual([a.job_id, a.attempt, b.job_id, b.attempt], [en.job_id, 1, en.job_id, 2]);
    const err = await rejectsWith(c.ack(a.job_id, { worker_id: "ts-a", attempt: a.attempt }), 409, "conflict");
    assert.ok(err instanceof ConflictError && isConflict(err));
    assert.deepEqual(await c.heartbeat("ts-a", { [a.job_id]: { attempt: a.attempt } }), { [a.job_id]: "lost" });
    await c.ack(b.job_id, { worker_id: "ts-b", attempt: b.attempt });
    const doc = await c.job(en.job_id);
    assert.equal(doc.state, "completed");
    assert.match(doc.errors[0].error, /lease expired/);
  },

  async unclaim({ c, q }) {
    const en = await c.enqueue({ queue: q, max_retries: 0 });
    const j = await fetchOne(c, q, "ts-w", 5);
    assert.deepEqual([j.job_id, j.attempt], [en.job_id, 1]);
    await rejectsWith(c.unclaim(j.job_id, "ts-other", 1), 409, "conflict");
    assert.deepEqual(await c.unclaim(j.job_id, "ts-w", j.attempt), { status: "pending" });
    const doc = await c.job(en.job_id);
    assert.equal(doc.state, "pending");
    assert.equal(doc.attempt, 0);
    assert.deepEqual(doc.errors ?? [], []);
    await rejectsWith(c.unclaim(j.job_id, "ts-w", j.attempt), 409, "conflict");
    const again = await fetchOne(c, q, "ts-w", 5);
    assert.deepEqual([again.job_id, again.attempt], [en.job_id, 1]);
    await c.ack(again.job_id, { worker_id: "ts-w", attempt: again.attempt });
    assert.equal((await c.job(en.job_id)).state, "completed");
  },

  async unique({ c, q }) {
    const r = { queue: q, unique_key: "welcome-user-1" };
    const first = await c.enqueue(r);
    const again = await c.enqueue(r);
    assert.equal(first.unique_existing, false);
    assert.equal(again.unique_existing, true);
    assert.equal(again.job_id, first.job_id);
    assert.equal(again.status, "pending");
    const queue = (await c.queues()).find((x) => x.name === q);
    assert.equal(queue?.pending, 1);
    const j = await fetchOne(c, q, "ts-w", 5);
    await c.ack(j.job_id, { worker_id: "ts-w", attempt: j.attempt });
    const later = await c.enqueue(r);
    assert.equal(later.unique_existing, false);
    assert.notEqual(later.job_id, first.job_id);
  },

  async batch_callback({ c, q }) {
    const done = q + ".done";
    const b = await c.enqueueBatch(
      [{ queue: q, payload: 1 }, { queue: q, payload: 2 }, { queue: q, payload: 3, max_retries: 1 }],
      { callback_queue: done, callback_payload: { album_id: "album_42" } },
    );
    assert.equal(b.job_ids.length, 3);
    assert.ok(b.batch_id);
    let st = await c.batch(b.batch_id);
    assert.equal(st.total, 3);
    assert.equal(st.pending, 3);
    const held = new Map();
    while (held.size < 3) {
      for (const j of await c.fetch({ queues: [q], worker_id: "ts-w", timeout: 5, count: 3 })) held.set(j.job_id, j);
    }
    for (const [i, id] of b.job_ids.entries()) {
      const j = held.get(id);
      if (i < 2) await c.ack(id, { worker_id: "ts-w", attempt: j.attempt });
      else assert.equal((await c.fail(id, { error: "bad image", worker_id: "ts-w", attempt: j.attempt })).status, "dead");
    }
    const cb = await fetchOne(c, done, "ts-w", 10);
    assert.equal(cb.payload.album_id, "album_42");
    assert.deepEqual(cb.payload.batch, { id: b.batch_id, total: 3, succeeded: 2, failed: 1 });
    st = await c.batch(b.batch_id);
    assert.equal(st.succeeded, 2);
    assert.equal(st.failed, 1);
    assert.ok(st.callback_job_id);
  },

  async chain({ c, q }) {
    const extract = q + ".extract";
    const summarize = q + ".summarize";
    const en = await c.enqueue({
      queue: extract,
      payload: { doc: "d1" },
      chain: { steps: [{ queue: extract }, { queue: summarize, payload: { mode: "short" } }] },
    });
    const j = await fetchOne(c, extract, "ts-w", 5);
    const doc = await c.job(en.job_id);
    assert.ok(doc.chain_id);
    assert.equal(doc.chain_step, 0);
    const result = { text: "extracted" };
    await c.ack(j.job_id, { result, worker_id: "ts-w", attempt: j.attempt });
    const next = await fetchOne(c, summarize, "ts-w", 10);
    assert.equal(next.payload.mode, "short");
    assert.deepEqual(next.payload.previous_result, result);
    assert.equal((await c.job(next.job_id)).chain_id, doc.chain_id);
    await c.ack(next.job_id, { worker_id: "ts-w", attempt: next.attempt });
    for (const id of [en.job_id, next.job_id]) assert.equal((await c.job(id)).state, "completed");
  },

  async search_paging({ c, q }) {
    const tags = { run: "search-paging" };
    const want = new Set();
    for (let i = 0; i < 7; i++) want.add((await c.enqueue({ queue: q, payload: i, tags })).job_id);
    const r = { queue: q, tags, limit: 3, sort: "created_at", order: "asc" };
    const sizes = [];
    for await (const page of c.searchPages(r)) sizes.push(page.jobs.length);
    assert.deepEqual(sizes, [3, 3, 1]);
    const got = [];
    for await (const hit of c.searchAll(r)) got.push(hit.id);
    assert.equal(new Set(got).size, got.length, "a job on two pages");
    assert.deepEqual(new Set(got), want);
    const one = await c.search(r);
    assert.equal(one.has_more, true);
    assert.equal(one.total, 7);
  },

  async bulk({ c, q }) {
    const ids = [];
    for (let i = 0; i < 5; i++) ids.push((await c.enqueue({ queue: q, payload: i })).job_id);
    const byIds = await c.bulk({ job_ids: ids.slice(0, 2), action: "change_priority", priority: "critical" });
    assert.equal(byIds.accepted, undefined);
    assert.equal(byIds.result.affected, 2);
    assert.equal(byIds.result.errors, 0);
    assert.equal((await c.job(ids[0])).priority, "critical");
    await rejectsWith(c.bulk({ filter: { queue: q }, action: "cancel" }), 400, "confirmation_required");
    const bg = await c.bulk({ filter: { queue: q, state: ["pending"] }, action: "cancel", async: true, confirm: true });
    assert.equal(bg.result, undefined);
    assert.ok(bg.accepted.bulk_operation_id);
    const final = await c.watchBulk(bg.accepted.bulk_operation_id);
    assert.equal(final.status, "completed");
    assert.equal(final.affected, 5);
    assert.equal((await c.bulkStatus(bg.accepted.bulk_operation_id)).status, "completed");
    for (const id of ids) assert.equal((await c.job(id)).state, "cancelled");
  },

  async events_resume({ c, q }) {
    // Opens the queue's stream of enqueued events and resolves once the server opened it.
    const open = async (lastEventId) => {
      let opened;
      const isOpen = new Promise((r) => (opened = r));
      const it = c.events({ queues: [q], types: ["enqueued"], lastEventId, onOpen: () => opened() })[Symbol.asyncIterator]();
      const first = it.next();
      await Promise.race([isOpen, first.then((r) => assert.fail(`the stream ended before it opened: ${JSON.stringify(r)}`))]);
      let pending = first;
      return {
        async nextJob() {
          for (;;) {
            const { value, done } = await (pending ?? it.next());
            pending = null;
            assert.ok(!done, "the stream ended");
            assert.notEqual(value.type, "reset", value.reason);
            if (value.type === "job") return value;
          }
        },
        close: () => it.return(),
      };
    };
    let s = await open();
    const a = await c.enqueue({ queue: q, payload: "a" });
    let lastId;
    while (!lastId) {
      const ev = await s.nextJob();
      if (ev.job.job_id === a.job_id && ev.job.type === "enqueued") lastId = ev.id;
    }
    await s.close();
    const b = await c.enqueue({ queue: q, payload: "b" });
    const d = await c.enqueue({ queue: q, payload: "c" });
    s = await open(lastId);
    try {
      for (const want of [b.job_id, d.job_id]) {
        const ev = await s.nextJob();
        assert.equal(ev.job.job_id, want);
        assert.equal(ev.job.type, "enqueued");
      }
    } finally {
      await s.close();
    }
  },

  async backoff_429({ c, q, url }) {
    const { key } = await c.createKey({ name: "ts-backoff", role: "producer", rate_write: 1 });
    const statuses = [];
    let retryAfter = "";
    for (let i = 0; i < 2; i++) {
      const res = await fetch(url + "/api/v1/enqueue", {
        method: "POST",
        headers: { "Content-Type": "application/json", Authorization: "Bearer " + key },
        body: JSON.stringify({ queue: q }),
      });
      await res.text();
      statuses.push(res.status);
      retryAfter = res.headers.get("retry-after");
    }
    assert.deepEqual(statuses, [201, 429]);
    assert.ok(Number(retryAfter) >= 1, `Retry-After ${retryAfter}`);
    const kc = new Client(url, { apiKey: key });
    assert.ok((await kc.enqueue({ queue: q })).job_id);
    kc.maxRetries = 0;
    let raised = 0;
    for (let i = 0; i < 2; i++) {
      try {
        await kc.enqueue({ queue: q });
      } catch (err) {
        assert.ok(err instanceof CorvoError);
        assert.equal(err.status, 429);
        assert.equal(err.code, "rate_limited");
        assert.ok(err.retryAfterMs >= 1000, `retry after ${err.retryAfterMs} ms`);
        raised++;
      }
    }
    assert.ok(raised > 0, "two enqueues in a row at 1 a second: none was refused");
  },

  async failover({ q, url }) {
    const dead = "http://" + (await freeAddr()); // nothing listens there
    const c = new Client([dead, url]);
    const en = await c.enqueue({ queue: q });
    assert.equal(c.urls[0], url);
    assert.equal((await c.job(en.job_id)).queue, q);
  },

  async typed_errors({ c }) {
    const err = await rejectsWith(c.job("job_0_01JD5Q8Y6Z3M4N5P6Q7R8S9T0V"), 404, "not_found");
    assert.ok(err instanceof NotFoundError);
    await rejectsWith(c.enqueue({ queue: "bad queue!" }), 400, "invalid_request");
    await rejectsWith(c.ack("job_0_01JD5Q8Y6Z3M4N5P6Q7R8S9T0V", { worker_id: "ts-w", attempt: 1 }), 404, "not_found");
  },

  async worker_runtime({ c, q }) {
    const ids = [];
    for (let i = 0; i < 12; i++) {
      const r = i === 5 ? { queue: q, payload: { n: i, fail: true }, max_retries: 1 } : { queue: q, payload: { n: i } };
      ids.push((await c.enqueue(r)).job_id);
    }
    const w = new Worker(c, { concurrency: 4, fetchTimeoutMs: 1000, handleSignals: false });
    let running = 0;
    let most = 0;
    w.register(q, async (job) => {
      running++;
      most = Math.max(most, running);
      try {
        await new Promise((r) => setTimeout(r, 5));
        if (job.payload.fail) throw new Error("boom");
        return { double: 2 * job.payload.n };
      } finally {
        running--;
      }
    });
    const stop = runWorker(w);
    try {
      for (const [i, id] of ids.entries()) {
        if (i === 5) {
          const doc = await waitState(c, id, "dead");
          assert.match(doc.last_error, /boom/);
        } else {
          assert.deepEqual((await waitState(c, id, "completed")).result, { double: 2 * i });
        }
      }
    } finally {
      await stop();
    }
    assert.ok(most <= 4, `${most} handlers ran at once, concurrency 4`);
    assert.ok((await c.workers()).some((x) => x.id === w.id), "the worker is not listed");
  },

  async enqueue_coalescing({ c, q }) {
    const batchRequests = async () => {
      let n = 0;
      for (const line of (await c.metrics()).split("\n")) {
        const prefix = 'corvo_http_requests_total{route="POST /api/v1/enqueue/batch",';
        if (line.startsWith(prefix)) n += Number(line.slice(line.lastIndexOf(" ") + 1));
      }
      return n;
    };
    const before = await batchRequests();
    const answers = await Promise.all(Array.from({ length: 200 }, (_, i) => c.enqueue({ queue: q, payload: i })));
    const ids = new Set(answers.map((a) => a.job_id));
    assert.equal(ids.size, 200);
    assert.ok(!ids.has(undefined) && !ids.has(""));
    assert.equal((await c.queues()).find((x) => x.name === q)?.pending, 200);
    assert.ok((await batchRequests()) > before, "no call was coalesced");
  },
};

let server;
before(async () => {
  server = await startServer(suite.server.args);
});
after(async () => {
  await server?.stop();
});

test("every scenario of the list has an implementation, and only those", () => {
  const listed = suite.scenarios.map((s) => s.id);
  const missing = listed.filter((id) => !(id in scenarios));
  assert.deepEqual(missing, [], `scenarios without an implementation in the TypeScript SDK: ${missing.join(", ")}`);
  const extra = Object.keys(scenarios).filter((id) => !listed.includes(id));
  assert.deepEqual(extra, [], `implemented scenarios that scenarios.json does not list: ${extra.join(", ")}`);
});

// One after another: enqueue_coalescing reads a server-wide counter.
for (const s of suite.scenarios) {
  test(`conformance: ${s.id} — ${s.title}`, { timeout: 60_000 }, async () => {
    const impl = scenarios[s.id];
    assert.ok(impl, `scenario ${s.id} has no implementation in the TypeScript SDK`);
    await impl({ c: new Client(server.url), q: `ts.${s.id}`, url: server.url });
  });
}
