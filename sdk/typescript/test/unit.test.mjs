// Unit tests of the client and worker runtime against a scripted HTTP
// server (node:http): what each request carried and in which order.
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { test } from "node:test";
import { BudgetExceededError, Client, CorvoError, ErrorCodes, NotFoundError, ProviderError, TooManyRequestsError, UnavailableError, Worker } from "../dist/index.js";
import { freeAddr } from "./server.mjs";

// A scripted server stands for one node: its tests count every request,
// so the client does not read the cluster's placement from it (the
// placement tests below do).
const single = { placement: false };

/** A server answering with route(req, body) → {status, headers, body} (or a promise of it). */
async function fake(route) {
  const seen = [];
  const srv = createServer(async (req, res) => {
    let raw = "";
    for await (const chunk of req) raw += chunk;
    const body = raw ? JSON.parse(raw) : undefined;
    const r = { method: req.method, path: req.url, headers: req.headers, body };
    seen.push(r);
    const a = (await route(r, seen.length)) ?? { status: 404, body: { error: "no route", code: "not_found" } };
    res.writeHead(a.status, { "Content-Type": "application/json", ...a.headers });
    res.end(a.body === undefined ? "" : JSON.stringify(a.body));
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${srv.address().port}`;
  return { url, seen, close: () => new Promise((r) => srv.close(r)) };
}

test("429 and 503 are retried after their Retry-After; with retries off the typed error surfaces", async () => {
  const s = await fake((r, n) => {
    if (n === 1) return { status: 429, headers: { "Retry-After": "0.05" }, body: { error: "overloaded", code: "overloaded" } };
    if (n === 2) return { status: 503, headers: { "Retry-After": "0" }, body: { error: "no leader", code: "unavailable" } };
    if (n === 3) return { status: 201, body: { job_id: "job_0_x", status: "pending", unique_existing: false } };
    return { status: 429, headers: { "Retry-After": "2" }, body: { error: "slow down", code: "rate_limited" } };
  });
  try {
    const c = new Client(s.url, single);
    const start = Date.now();
    assert.equal((await c.enqueue({ queue: "q" })).job_id, "job_0_x");
    assert.equal(s.seen.length, 3);
    assert.ok(Date.now() - start >= 50, "Retry-After was not honoured");
    c.maxRetries = 0;
    await assert.rejects(c.enqueue({ queue: "q" }), (err) => {
      assert.ok(err instanceof TooManyRequestsError && err instanceof CorvoError);
      assert.equal(err.status, 429);
      assert.equal(err.code, ErrorCodes.RateLimited);
      assert.equal(err.retryAfterMs, 2000);
      return true;
    });
  } finally {
    await s.close();
  }
});

test("errors are typed by status and carry the server's code and message", async () => {
  const s = await fake((r) =>
    r.path.startsWith("/api/v1/jobs/")
      ? { status: 404, body: { error: "job job_1_x not found", code: "not_found" } }
      : { status: 503, body: { error: "stopping", code: "shutting_down" } },
  );
  try {
    const c = new Client(s.url, { ...single, maxRetries: 0 });
    await assert.rejects(c.job("job_1_x"), (err) => err instanceof NotFoundError && err.code === "not_found" && /not found/.test(err.message));
    await assert.rejects(c.queues(), (err) => err instanceof UnavailableError && err.code === "shutting_down");
  } finally {
    await s.close();
  }
});

test("a node answering 503 shutting_down or refusing connections sends the client to the next URL", async () => {
  const stopping = await fake(() => ({ status: 503, headers: { "Retry-After": "5" }, body: { error: "stopping", code: "shutting_down" } }));
  const live = await fake(() => ({ status: 200, body: { queues: [] } }));
  try {
    const dead = "http://" + (await freeAddr());
    const c = new Client([dead, stopping.url, live.url], single);
    const start = Date.now();
    assert.deepEqual(await c.queues(), []);
    assert.ok(Date.now() - start < 5000, "waited out the stopping node's Retry-After instead of moving on");
    assert.equal(c.urls[0], live.url);
    assert.equal(stopping.seen.length, 1);
  } finally {
    await stopping.close();
    await live.close();
  }
});

/** A server counting its connections; answer(req, n, conn) handles the n-th request (conn: its connection's number). */
async function counting(answer) {
  const seen = [];
  let conns = 0;
  const srv = createServer(async (req, res) => {
    let raw = "";
    for await (const chunk of req) raw += chunk;
    const conn = req.socket.connNo;
    seen.push({ method: req.method, path: req.url, headers: req.headers, raw, conn });
    answer(req, res, seen.length, conn);
  });
  srv.on("connection", (sock) => (sock.connNo = ++conns));
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${srv.address().port}`, seen, conns: () => conns, close: () => new Promise((r) => srv.close(r)) };
}

test("requests share kept-alive connections: calls one after another use one, calls at once one each, then reuse them", async () => {
  const s = await counting((req, res) => {
    res.writeHead(200, { "Content-Type": "application/json" });
    res.end(JSON.stringify({ queue: "q", paused: true }));
  });
  try {
    const c = new Client(s.url, single);
    for (let i = 0; i < 5; i++) await c.pauseQueue("q");
    assert.equal(s.conns(), 1, "a call after another opened a new connection");
    await Promise.all(Array.from({ length: 3 }, () => c.pauseQueue("q")));
    assert.equal(s.conns(), 3);
    await Promise.all(Array.from({ length: 3 }, () => c.pauseQueue("q")));
    assert.equal(s.conns(), 3, "calls at once did not reuse the idle connections");
    // A POST without a body says so, rather than sending an empty chunked one.
    assert.equal(s.seen[0].headers["content-length"], "0");
    assert.equal(s.seen[0].headers["transfer-encoding"], undefined);
    assert.equal(s.seen[0].raw, "");
  } finally {
    await s.close();
  }
});

test("a request on a kept-alive connection the server closed is sent again on a new one, to the same URL, as no retry", async () => {
  const s = await counting((req, res, n) => {
    if (n === 2) return req.socket.destroy(); // closed as the request came in
    res.writeHead(201, { "Content-Type": "application/json" });
    res.end(JSON.stringify({ job_id: "job_0_" + n, status: "pending", unique_existing: false }));
  });
  const other = await fake(() => ({ status: 500, body: { error: "the failover went here", code: "internal" } }));
  try {
    // No retries: the resend is not one (a retry would throw).
    const c = new Client([s.url, other.url], { ...single, maxRetries: 0 });
    assert.equal((await c.enqueue({ queue: "q", payload: { a: 1 } })).job_id, "job_0_1");
    assert.equal((await c.enqueue({ queue: "q", payload: { a: 2 } })).job_id, "job_0_3");
    assert.deepEqual(s.seen.map((r) => [r.path, r.conn, JSON.parse(r.raw).payload.a]), [
      ["/api/v1/enqueue", 1, 1],
      ["/api/v1/enqueue", 1, 2],
      ["/api/v1/enqueue", 2, 2],
    ]);
    assert.equal(other.seen.length, 0, "the client moved to the next URL");
    assert.equal(c.urls[0], s.url);
  } finally {
    await s.close();
    await other.close();
  }
});

test("answers are read however they come: split byte by byte, chunked with extensions and trailers, after a 100, ended by the connection closing; Connection: close is honoured", async () => {
  const { createServer: tcpServer } = await import("node:net");
  const json = (o) => JSON.stringify(o);
  const body = json({ id: "job_0_x", payload: { s: "héllo ✓" } }); // multi-byte characters, split below
  const answers = [
    // 1: an interim 100, then a chunked answer with a chunk extension and a trailer, one byte per write.
    { bytes: "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" +
        "5;ext=1\r\n" + '{"que' + "\r\n" + "8\r\n" + 'ues":[]}' + "\r\n0\r\nX-Trailer: y\r\n\r\n", byByte: true },
    // 2: on the same connection, a Content-Length answer split inside a character, then Connection: close.
    { bytes: Buffer.concat([Buffer.from(`HTTP/1.1 200 OK\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n`), Buffer.from(body)]), byByte: true },
    // 3: on a new connection, an HTTP/1.0 answer without a length: it ends when the connection does.
    { bytes: "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + json({ queues: [{ name: "q" }] }), close: true },
    // 4: a new connection again, kept alive.
    { bytes: `HTTP/1.1 204 No Content\r\n\r\n` },
  ];
  const conns = [];
  let n = 0;
  const srv = tcpServer((sock) => {
    const no = conns.push(sock);
    let buf = "";
    sock.setNoDelay(true);
    sock.on("data", async (d) => {
      buf += d.toString("latin1");
      if (!buf.includes("\r\n\r\n")) return;
      buf = "";
      const a = answers[n++];
      a.conn = no;
      const bytes = Buffer.from(a.bytes);
      if (a.byByte) {
        for (let i = 0; i < bytes.length; i++) {
          sock.write(bytes.subarray(i, i + 1));
          await new Promise((r) => setImmediate(r));
        }
      } else sock.write(bytes);
      if (a.close) sock.end();
    });
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  try {
    const c = new Client(`http://127.0.0.1:${srv.address().port}`, single);
    assert.deepEqual(await c.queues(), []);
    assert.deepEqual(await c.job("job_0_x"), JSON.parse(body));
    assert.deepEqual(await c.queues(), [{ name: "q" }]);
    await c.deleteSchedule("s");
    assert.equal(n, 4);
    assert.deepEqual(answers.map((a) => a.conn), [1, 1, 2, 3], "connections not reused, or reused after close");
  } finally {
    for (const s of conns) s.destroy();
    await new Promise((r) => srv.close(r));
  }
});

test("enqueue: a call goes out at once when idle; calls made while 2 are in flight go together as one batch", async () => {
  const held = [];
  let n = 0;
  const s = await fake((r) => {
    if (r.path === "/api/v1/enqueue") {
      const id = `job_0_${++n}`;
      return new Promise((resolve) => held.push(() => resolve({ status: 201, body: { job_id: id, status: "pending", unique_existing: false } })));
    }
    if (r.path === "/api/v1/enqueue/batch") {
      // The second job was not applied (its shard did not commit).
      const ids = r.body.jobs.map((_, i) => `job_0_b${i}`);
      return { status: 503, body: { error: "no leader", code: "unavailable", job_ids: ids, not_applied: [1] } };
    }
  });
  try {
    const c = new Client(s.url, single);
    const first = c.enqueue({ queue: "q", payload: 0 });
    await waitFor(() => held.length === 1); // sent alone, at once
    const second = c.enqueue({ queue: "q", payload: 1 });
    await waitFor(() => held.length === 2);
    const rest = [2, 3, 4, 5].map((i) => c.enqueue({ queue: "q", payload: i }));
    assert.equal(s.seen.length, 2, "calls made while 2 requests are out must wait");
    held[0]();
    held[1]();
    await waitFor(() => held.length === 3); // the batch's unapplied job, alone
    held[2]();
    const answers = await Promise.all([first, second, ...rest]);
    assert.deepEqual(answers.map((a) => a.job_id), ["job_0_1", "job_0_2", "job_0_b0", "job_0_3", "job_0_b2", "job_0_b3"]);
    assert.deepEqual(s.seen.map((r) => r.path), ["/api/v1/enqueue", "/api/v1/enqueue", "/api/v1/enqueue/batch", "/api/v1/enqueue"]);
    assert.deepEqual(s.seen[2].body.jobs.map((j) => j.payload), [2, 3, 4, 5]);
    assert.equal(s.seen[3].body.payload, 3);
    // A unique job never joins a batch: its answer says whether it existed.
    const u = c.enqueue({ queue: "q", unique_key: "k" });
    await waitFor(() => held.length === 4);
    held[3]();
    await u;
    assert.equal(s.seen.at(-1).path, "/api/v1/enqueue");
  } finally {
    await s.close();
  }
});

async function waitFor(cond) {
  const deadline = Date.now() + 10_000;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error("condition never held");
    await new Promise((r) => setTimeout(r, 2));
  }
}

const job = (id, attempt = 1) => ({ job_id: id, queue: "q", payload: { id }, priority: "normal", attempt, max_retries: 3,
  lease_duration: 60, lease_expires_at: null, checkpoint: null, tags: {}, created_at: "2026-01-01T00:00:00.000Z" });

test("the worker fetches as many jobs as it has free slots, and one heartbeat carries every running job", async () => {
  const fetches = [];
  const heartbeats = [];
  const s = await fake((r) => {
    if (r.path === "/api/v1/fetch") {
      fetches.push(r.body);
      if (fetches.length === 1) return { status: 200, body: { jobs: [job("a"), job("b")] } };
      return new Promise((resolve) => setTimeout(() => resolve({ status: 204 }), 20));
    }
    if (r.path === "/api/v1/heartbeat") {
      heartbeats.push(r.body);
      return { status: 200, body: { jobs: Object.fromEntries(Object.keys(r.body.jobs).map((id) => [id, { status: "ok" }])) } };
    }
    if (r.path.startsWith("/api/v1/ack")) return { status: 200, body: { status: "completed", acked: 2, errors: [], jobs: [] } };
  });
  try {
    const w = new Worker(new Client(s.url, single), { id: "w1", concurrency: 3, fetchTimeoutMs: 1000, heartbeatIntervalMs: 20, handleSignals: false });
    let release;
    const gate = new Promise((r) => (release = r));
    w.register("q", async (j, ctx) => {
      ctx.progress({ at: j.payload.id });
      await gate;
      return { done: j.payload.id };
    });
    const done = w.run();
    await waitFor(() => fetches.length >= 2 && heartbeats.some((h) => Object.keys(h.jobs).length === 2));
    assert.equal(fetches[0].count, 3);
    assert.equal(fetches[1].count, 1, "two slots busy: the next fetch asks for one job");
    assert.equal(fetches[0].worker_id, "w1");
    const hb = heartbeats.find((h) => Object.keys(h.jobs).length === 2);
    assert.deepEqual(hb, { worker_id: "w1", jobs: { a: { attempt: 1, progress: { at: "a" } }, b: { attempt: 1, progress: { at: "b" } } } });
    release();
    w.stop();
    await done;
    const acks = s.seen.filter((r) => r.path.startsWith("/api/v1/ack"));
    const acked = acks.flatMap((r) => (r.path === "/api/v1/ack/batch" ? r.body.acks.map((a) => a.job_id) : [r.path.split("/").at(-1)]));
    assert.deepEqual(acked.sort(), ["a", "b"]);
  } finally {
    await s.close();
  }
});

test("the worker's ack carries its next fetch and runs the job it brings back without another fetch", async () => {
  const s = await fake((r, n) => {
    if (r.path === "/api/v1/fetch") {
      if (s.seen.filter((x) => x.path === "/api/v1/fetch").length === 1) return { status: 200, body: { jobs: [job("a")] } };
      return new Promise((resolve) => setTimeout(() => resolve({ status: 204 }), 20));
    }
    if (r.path === "/api/v1/ack/a") return { status: 200, body: { status: "completed", jobs: [job("b")] } };
    if (r.path === "/api/v1/ack/b") return { status: 200, body: { status: "completed", jobs: [] } };
    void n;
  });
  try {
    const w = new Worker(new Client(s.url, single), { id: "w1", concurrency: 1, fetchTimeoutMs: 1000, handleSignals: false });
    const ran = [];
    w.register("q", (j) => {
      ran.push(j.job_id);
      return { ok: j.job_id };
    });
    const done = w.run();
    await waitFor(() => ran.length === 2 && s.seen.some((r) => r.path === "/api/v1/ack/b"));
    w.stop();
    await done;
    const ackA = s.seen.find((r) => r.path === "/api/v1/ack/a");
    // count 2: the slot's next job and, after a quick handler, one to hold.
    assert.deepEqual(ackA.body, { worker_id: "w1", attempt: 1, result: { ok: "a" }, fetch: { queues: ["q"], worker_id: "w1", hostname: ackA.body.fetch.hostname, timeout: 0, count: 2 } });
    assert.deepEqual(ran, ["a", "b"]);
    const fetchesBeforeB = s.seen.slice(0, s.seen.findIndex((r) => r.path === "/api/v1/ack/a") + 1).filter((r) => r.path === "/api/v1/fetch");
    assert.equal(fetchesBeforeB.length, 1, "job b came with the ack, not from a fetch");
  } finally {
    await s.close();
  }
});

test("a handler that throws fails its job with the error, its stack and its checkpoint; a checkpoint carries the progress", async () => {
  const s = await fake((r) => {
    if (r.path === "/api/v1/fetch") {
      if (s.seen.filter((x) => x.path === "/api/v1/fetch").length === 1) return { status: 200, body: { jobs: [job("a", 2)] } };
      return new Promise((resolve) => setTimeout(() => resolve({ status: 204 }), 20));
    }
    if (r.path === "/api/v1/heartbeat") return { status: 200, body: { jobs: { a: { status: "ok" } } } };
    if (r.path === "/api/v1/fail/a") return { status: 200, body: { status: "retrying", attempts_remaining: 1 } };
  });
  try {
    const w = new Worker(new Client(s.url, single), { id: "w1", concurrency: 1, fetchTimeoutMs: 1000, handleSignals: false });
    w.register("q", async (j, ctx) => {
      ctx.progress({ current: 5, total: 10 });
      await ctx.checkpoint({ offset: 5 });
      throw new Error("disk full");
    });
    const done = w.run();
    await waitFor(() => s.seen.some((r) => r.path === "/api/v1/fail/a"));
    w.stop();
    await done;
    const hb = s.seen.find((r) => r.path === "/api/v1/heartbeat");
    assert.deepEqual(hb.body, { worker_id: "w1", jobs: { a: { attempt: 2, checkpoint: { offset: 5 }, progress: { current: 5, total: 10 } } } });
    const f = s.seen.find((r) => r.path === "/api/v1/fail/a").body;
    assert.equal(f.error, "disk full");
    assert.match(f.backtrace, /Error: disk full/);
    assert.deepEqual(f.checkpoint, { offset: 5 });
    assert.equal(f.attempt, 2);
    assert.equal(f.worker_id, "w1");
  } finally {
    await s.close();
  }
});

test("a drain closes the fetch in flight: an idle worker in a 30 s long-poll stops without waiting for its answer", { timeout: 20_000 }, async () => {
  let closed;
  const fetchClosed = new Promise((r) => (closed = r));
  const held = [];
  const bodies = [];
  const srv = createServer((req, res) => {
    let raw = "";
    req.on("data", (d) => (raw += d));
    req.on("end", () => {
      bodies.push(JSON.parse(raw));
      held.push(res); // never answered: the long-poll is still waiting
      res.once("close", () => closed());
    });
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  try {
    const w = new Worker(new Client(`http://127.0.0.1:${srv.address().port}`, single), { id: "w1", concurrency: 4, handleSignals: false });
    w.register("q", () => undefined);
    const done = w.run();
    await waitFor(() => bodies.length === 1);
    assert.equal(bodies[0].timeout, 30, "the default long-poll");
    assert.equal(bodies[0].count, 4);
    w.stop();
    await done; // resolves although the fetch was never answered
    await fetchClosed; // and the server saw the request go
    assert.equal(bodies.length, 1, "the drain fetched again");
  } finally {
    for (const res of held) res.destroy();
    await new Promise((r) => srv.close(r));
  }
});

test("ErrorCodes holds exactly the codes of docs/api.md's error table", async () => {
  const { readFileSync } = await import("node:fs");
  const { join } = await import("node:path");
  const { repoRoot } = await import("./server.mjs");
  const api = readFileSync(join(repoRoot, "docs/api.md"), "utf8");
  const table = api.slice(api.indexOf("## Errors"), api.indexOf("## Requests from browsers"));
  const documented = [...table.matchAll(/^\| [0-9 /]+ \| `([a-z_]+)` \|/gm)].map((m) => m[1]).sort();
  assert.ok(documented.length > 20, `read ${documented.length} codes from docs/api.md`);
  assert.deepEqual(Object.values(ErrorCodes).sort(), documented);
});

// ---- usage, budgets and routing (as the Go SDK's worker: sdk/go/worker.go)

/** A fake server handing out `jobs` on the first fetch, answering heartbeats with hb(body) and acks and fails. */
function llmFake(jobs, hb) {
  let fetched = false;
  return fake((r) => {
    if (r.path === "/api/v1/fetch") {
      if (!fetched) {
        fetched = true;
        return { status: 200, body: { jobs } };
      }
      return new Promise((resolve) => setTimeout(() => resolve({ status: 204 }), 20));
    }
    if (r.path === "/api/v1/heartbeat") return hb(r.body);
    if (r.path.startsWith("/api/v1/ack")) return { status: 200, body: { status: "completed", acked: 1, errors: [], jobs: [] } };
    if (r.path.startsWith("/api/v1/fail/")) return { status: 200, body: { status: "retrying", attempts_remaining: 1 } };
  });
}

const okAll = (body, extra = {}) => ({ status: 200, body: { jobs: Object.fromEntries(Object.keys(body.jobs).map((id) => [id, { status: "ok", ...extra }])) } });

test("usage a handler reports rides the heartbeats as the attempt's running total; the ack carries only what came after the last applied one", async () => {
  const s = await llmFake([job("a")], (b) => okAll(b));
  try {
    const w = new Worker(new Client(s.url, single), { id: "w1", concurrency: 1, fetchTimeoutMs: 1000, heartbeatIntervalMs: 10, handleSignals: false });
    const heartbeatUsage = () => s.seen.filter((r) => r.path === "/api/v1/heartbeat").map((r) => r.body.jobs.a.usage).filter(Boolean);
    let seenByHandler;
    w.register("q", async (j, ctx) => {
      ctx.reportUsage({ input_tokens: 1000, output_tokens: 100, model: "fake-large", provider: "fake", cost_usd: 0.011, latency_ms: 800 });
      ctx.reportUsage({ input_tokens: 500, output_tokens: 50, cache_read_tokens: 400, cost_usd: 0.0055 });
      // Until a heartbeat the server answered "ok" carried the total.
      await waitFor(() => heartbeatUsage().length >= 2);
      ctx.reportUsage({ input_tokens: 70, output_tokens: 7, cost_usd: 0.00077, model: "fake-small" });
      seenByHandler = ctx.usage;
      return { answer: "Paris" };
    });
    const done = w.run();
    await waitFor(() => s.seen.some((r) => r.path.startsWith("/api/v1/ack")));
    w.stop();
    await done;
    assert.deepEqual(heartbeatUsage()[0], { input_tokens: 1500, output_tokens: 150, cache_read_tokens: 400, model: "fake-large", provider: "fake", cost_usd: 0.0165, latency_ms: 800 });
    assert.deepEqual(seenByHandler, { input_tokens: 1570, output_tokens: 157, cache_read_tokens: 400, model: "fake-small", provider: "fake", cost_usd: 0.01727, latency_ms: 800 });
    const ack = s.seen.find((r) => r.path.startsWith("/api/v1/ack"));
    assert.deepEqual(ack.body.usage, { input_tokens: 70, output_tokens: 7, cost_usd: 0.00077, model: "fake-small", provider: "fake" });
  } finally {
    await s.close();
  }
});

test("a job's ack waits for the heartbeat in flight: applied, it reported everything (no usage on the ack); refused, the ack carries it all", async () => {
  for (const answer of ["ok", "error"]) {
    let release;
    const gate = new Promise((r) => (release = r));
    const s = await llmFake([job("a")], async (b) => {
      await gate;
      return answer === "ok" ? okAll(b) : { status: 500, body: { error: "boom", code: "internal" } };
    });
    try {
      const w = new Worker(new Client(s.url, single), { id: "w1", concurrency: 1, fetchTimeoutMs: 1000, heartbeatIntervalMs: 10, handleSignals: false, onError: () => {} });
      let returned = false;
      w.register("q", async (j, ctx) => {
        ctx.reportUsage({ input_tokens: 10, cost_usd: 0.5, model: "m" });
        await waitFor(() => s.seen.some((r) => r.path === "/api/v1/heartbeat" && r.body.jobs.a.usage));
        returned = true;
        return 1;
      });
      const done = w.run();
      // The handler's return settles the job's usage within microtasks: an
      // ack that did not wait for the heartbeat would carry it all by now.
      await waitFor(() => returned);
      release();
      await waitFor(() => s.seen.some((r) => r.path.startsWith("/api/v1/ack")));
      w.stop();
      await done;
      const ack = s.seen.find((r) => r.path.startsWith("/api/v1/ack"));
      if (answer === "ok") assert.equal(ack.body.usage, undefined, "the heartbeat reported it all");
      else assert.deepEqual(ack.body.usage, { input_tokens: 10, cost_usd: 0.5, model: "m" });
    } finally {
      await s.close();
    }
  }
});

test("a heartbeat's budget_exceeded aborts the job's signal with BudgetExceededError and the fail says so; with continueOverBudget the handler reads ctx.budgetExceeded", async () => {
  const s = await llmFake([job("a")], (b) => okAll(b, { budget_exceeded: true }));
  try {
    const w = new Worker(new Client(s.url, single), { id: "w1", concurrency: 1, fetchTimeoutMs: 1000, heartbeatIntervalMs: 10, handleSignals: false });
    let reason;
    let flag;
    w.register("q", async (j, ctx) => {
      ctx.reportUsage({ cost_usd: 0.02 });
      // As a fetch() given ctx.signal rejects when it is aborted.
      await new Promise((_, reject) =>
        ctx.signal.addEventListener("abort", () => {
          reason = ctx.signal.reason;
          flag = ctx.budgetExceeded;
          reject(new DOMException("This operation was aborted", "AbortError"));
        }),
      );
    });
    const done = w.run();
    await waitFor(() => s.seen.some((r) => r.path === "/api/v1/fail/a"));
    w.stop();
    await done;
    assert.ok(reason instanceof BudgetExceededError);
    assert.equal(flag, true);
    const f = s.seen.find((r) => r.path === "/api/v1/fail/a").body;
    assert.equal(f.error, "corvo: job budget exceeded");
    assert.equal(f.provider_error, undefined);
  } finally {
    await s.close();
  }

  const s2 = await llmFake([job("b")], (b) => okAll(b, { budget_exceeded: true }));
  try {
    const w = new Worker(new Client(s2.url, single), { id: "w1", concurrency: 1, fetchTimeoutMs: 1000, heartbeatIntervalMs: 10, handleSignals: false, continueOverBudget: true });
    let aborted;
    w.register("q", async (j, ctx) => {
      assert.equal(ctx.budgetExceeded, false);
      await waitFor(() => ctx.budgetExceeded);
      aborted = ctx.signal.aborted;
      return "done anyway";
    });
    const done = w.run();
    await waitFor(() => s2.seen.some((r) => r.path.startsWith("/api/v1/ack")));
    w.stop();
    await done;
    assert.equal(aborted, false);
    assert.equal(s2.seen.find((r) => r.path.startsWith("/api/v1/ack")).body.result, "done anyway");
  } finally {
    await s2.close();
  }
});

test("a fetched job's routing names the model to call; a ProviderError fails the attempt with provider_error", async () => {
  const s = await llmFake([{ ...job("a"), routing: { target: "gpt-4o", index: 1 } }], (b) => okAll(b));
  try {
    const w = new Worker(new Client(s.url, single), { id: "w1", concurrency: 1, fetchTimeoutMs: 1000, handleSignals: false });
    let target;
    w.register("q", (j) => {
      target = j.routing?.target;
      throw new ProviderError("HTTP 529 overloaded", { cause: new Error("upstream") });
    });
    const done = w.run();
    await waitFor(() => s.seen.some((r) => r.path === "/api/v1/fail/a"));
    w.stop();
    await done;
    assert.equal(target, "gpt-4o");
    const f = s.seen.find((r) => r.path === "/api/v1/fail/a").body;
    assert.equal(f.error, "HTTP 529 overloaded");
    assert.equal(f.provider_error, true);
  } finally {
    await s.close();
  }
});

test("a server without unclaim (404) has a job the worker gives back failed with worker_shutdown", async () => {
  const s = await fake((r) =>
    r.path.startsWith("/api/v1/fail/") ? { status: 200, body: { status: "retrying", attempts_remaining: 2 } } : undefined,
  );
  try {
    const w = new Worker(new Client(s.url, single), { id: "w1", handleSignals: false });
    await w["handBack"]([{ job_id: "job_0_x", attempt: 2 }]);
    assert.deepEqual(s.seen.map((r) => r.path), ["/api/v1/unclaim/job_0_x", "/api/v1/fail/job_0_x"]);
    assert.deepEqual(s.seen[0].body, { worker_id: "w1", attempt: 2 });
    assert.deepEqual(s.seen[1].body, { error: "worker_shutdown", worker_id: "w1", attempt: 2 });
  } finally {
    await s.close();
  }
});
