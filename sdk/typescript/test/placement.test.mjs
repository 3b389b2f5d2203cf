// Placement routing (src/placement.ts, as sdk/go/placement.go): the queue
// → shard hash is the server's (xxhash64, vectors from the Go
// implementation github.com/cespare/xxhash/v2), scripted servers show the
// routing rules, and a real 3-node cluster shows that a client knowing the
// placement has nothing forwarded.
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { test } from "node:test";
import { Client, ForwardedHeader, shardForQueue, shardOfJobId, Worker, xxhash64 } from "../dist/index.js";
import { planPlacement, storedQueue } from "../dist/placement.js";
import { freeAddr, startServer, until } from "./server.mjs";

// xxhash.Sum64String(s) of github.com/cespare/xxhash/v2, printed by Go:
// every length class of the algorithm (0–3, 4–7, 8–31 bytes, 32-byte
// stripes and their tails) and multi-byte UTF-8.
const vectors = [
  ["", "ef46db3751d8e999"],
  ["a", "d24ec4f1a98c6e5b"],
  ["ab", "65f708ca92d04a61"],
  ["abc", "44bc2cf5ad770999"],
  ["abcd", "de0327b0d25d92cc"],
  ["abcde", "07e3670c0c8dc7eb"],
  ["q0", "015429239dc4a741"],
  ["default", "cb14bd8a5c561c96"],
  ["emails.send", "1c2424aab960d584"],
  ["acme/emails.send", "64cd0127b0056c57"],
  ["ünïcödé/队列", "0fb86e0f090e4c2d"],
  ["0123456789abcdef0123456789abcde", "1fdfc63febacfde7"],
  ["0123456789abcdef0123456789abcdef", "642a94958e71e6c5"],
  ["0123456789abcdef0123456789abcdef0", "e87684f08d6d0816"],
  ["corvo.c", "9099a03bb95d6410"],
  ["corvo.co", "d1ddaa8e65967e78"],
  ["corvo.cor", "a6f16be37f64d257"],
  ["corvo.corvo.cor", "f7e02f2910a59ae4"],
  ["corvo.corvo.corv", "b811dfb067650a40"],
  ["corvo.corvo.corvo", "fe7dc70b7d0830f2"],
  ["corvo.corvo.corvo.corvo.corvo.c", "add426e2a03c4f61"],
  ["corvo.corvo.corvo.corvo.corvo.cor", "0b87823a410e7d11"],
  ["corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.cor", "98c14a546c2b3cc7"],
  ["corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corv", "5bda8f9603e2dc1e"],
  ["corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo", "3e6c558d7319791c"],
  ["corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corv", "fbf5b9727aa72f43"],
  ["corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.co", "13216d321c9feda0"],
  ["corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.corvo.co", "2b96889974931b99"],
];

test("xxhash64 is github.com/cespare/xxhash/v2's Sum64String", () => {
  for (const [s, want] of vectors) assert.equal(xxhash64(s).toString(16).padStart(16, "0"), want, `xxhash64(${JSON.stringify(s)})`);
});

test("the queue → shard rule is the server's, namespaced queues hash as stored, job IDs give their shard", () => {
  // The table sdk/go's TestShardForQueueGolden and the router's pin.
  const got = ["default", "emails.send", "emails.bulk", "reports", "a", "q0", "q1", "q2"].map((q) => `${q}=${shardForQueue(q, 4)}`).join(" ");
  assert.equal(got, "default=2 emails.send=0 emails.bulk=0 reports=2 a=3 q0=1 q1=0 q2=2");
  assert.equal(storedQueue("default", "q"), "q");
  assert.equal(storedQueue("", "q"), "q");
  assert.equal(storedQueue("acme", "q"), "acme/q");
  const ids = { job_3_01HX7Y2K3M0000000000000000: 3, job_12_01HX: 12, job_x_1: -1, batch_1_x: -1, job_7: -1 };
  for (const [id, want] of Object.entries(ids)) assert.equal(shardOfJobId(id), want, id);
});

test("planPlacement puts each shard's leader first, then its other placed nodes that are up; one node routes nothing", () => {
  const st = {
    shard_count: 2,
    nodes: [
      { node_id: 1, http_address: "a:1", status: "up" },
      { node_id: 2, http_address: "b:1", status: "up" },
      { node_id: 3, http_address: "c:1", status: "down" },
    ],
    shards: [
      { shard_id: 0, leader_node: 2, placed_nodes: [1, 2, 3] },
      { shard_id: 1, leader_node: 3, placed_nodes: [3, 1] },
    ],
  };
  assert.deepEqual(planPlacement(st, "http://", "acme"), { ns: "acme", hosts: [["http://b:1", "http://a:1"], ["http://a:1"]] });
  assert.equal(planPlacement({ ...st, nodes: st.nodes.slice(0, 1) }, "http://", ""), null);
});

/** A scripted node: answers route(req, body), records what it was sent. */
async function node(route) {
  const seen = [];
  const srv = createServer(async (req, res) => {
    let raw = "";
    for await (const chunk of req) raw += chunk;
    const r = { method: req.method, path: req.url, body: raw ? JSON.parse(raw) : undefined };
    seen.push(r);
    const a = (await route(r)) ?? { status: 404, body: { error: "no route", code: "not_found" } };
    res.writeHead(a.status, { "Content-Type": "application/json", ...a.headers });
    res.end(a.body === undefined ? "" : JSON.stringify(a.body));
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  const addr = `127.0.0.1:${srv.address().port}`;
  return { addr, url: `http://${addr}`, seen, close: () => new Promise((r) => srv.close(r)), count: (p) => seen.filter((r) => r.path === p).length };
}

const enqueued = { status: 201, body: { job_id: "job_0_01HX", status: "pending", unique_existing: false } };

test("a worker groups its queues by the node leading their shard with 4 slots a group; with fewer, or without the placement, one group", async () => {
  const nodes = ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]; // never dialled: grouping reads the placement only
  const a = await node((r) => {
    if (r.path === "/api/v1/cluster/status") {
      return {
        status: 200,
        body: {
          shard_count: 6,
          nodes: nodes.map((addr, i) => ({ node_id: i + 1, http_address: addr, status: "up" })),
          shards: [0, 1, 2, 3, 4, 5].map((sh) => ({ shard_id: sh, leader_node: (sh % 3) + 1, placed_nodes: [(sh % 3) + 1] })),
        },
      };
    }
  });
  try {
    const queues = ["a", "b", "c", "d", "e", "f"];
    const off = new Client(a.url, { placement: false });
    assert.deepEqual(off.groupQueues(queues, 100), [{ node: "", queues }]);
    const c = new Client(a.url);
    await c.discover();
    const want = new Map();
    for (const q of queues) {
      const n = "http://" + nodes[shardForQueue(q, 6) % 3];
      want.set(n, [...(want.get(n) ?? []), q]);
    }
    const groups = c.groupQueues(queues, 4 * want.size);
    assert.equal(groups.length, want.size);
    for (const g of groups) assert.deepEqual(g.queues, want.get(g.node));
    assert.deepEqual(c.groupQueues(queues, 4 * want.size - 1), [{ node: "", queues }]);
  } finally {
    await a.close();
  }
});

test("a routed request goes to its shard's leader; an unreachable one is skipped and the placement read again; a 503 goes the usual way", async () => {
  const dead = await freeAddr(); // nothing listens: the shard's leader is down
  let statusReads = 0;
  let b503 = false;
  const status = (a, b) => ({
    status: 200,
    body: {
      shard_count: 1,
      nodes: [
        { node_id: 1, http_address: a, status: "up" },
        { node_id: 2, http_address: b, status: "up" },
      ],
      shards: [{ shard_id: 0, leader_node: 1, placed_nodes: [1, 2] }],
    },
  });
  const b = await node((r) => {
    if (r.path === "/api/v1/enqueue") return b503 ? { status: 503, headers: { "Retry-After": "0" }, body: { error: "no leader", code: "unavailable" } } : enqueued;
  });
  const a = await node((r) => {
    if (r.path === "/api/v1/cluster/status") {
      statusReads++;
      return status(dead, b.addr);
    }
    if (r.path === "/api/v1/enqueue") return enqueued;
  });
  try {
    const c = new Client(a.url, { coalesceEnqueues: false });
    await c.discover();
    assert.equal(statusReads, 1);
    await c.enqueue({ queue: "q" });
    assert.equal(b.count("/api/v1/enqueue"), 1, "the shard's other node did not get the enqueue");
    assert.equal(a.count("/api/v1/enqueue"), 0, "the enqueue went the usual way, not routed");
    await until("the placement read again after the dial failure", () => statusReads === 2);
    await c.enqueue({ queue: "q" });
    assert.equal(b.count("/api/v1/enqueue"), 2, "the unreachable leader is left out for a while");
    b503 = true;
    await c.enqueue({ queue: "q" });
    assert.equal(b.count("/api/v1/enqueue"), 3);
    assert.equal(a.count("/api/v1/enqueue"), 1, "a 503 from the routed node goes the usual way");
  } finally {
    await a.close();
    await b.close();
  }
});

test("an answer marked forwarded makes the client read the placement again; a 403 on it turns routing off", async () => {
  let statusReads = 0;
  let refuse = false;
  const b = await node((r) => (r.path === "/api/v1/jobs/job_1_01HX" ? { status: 200, headers: { [ForwardedHeader]: "1" }, body: { id: "job_1_01HX" } } : undefined));
  const a = await node((r) => {
    if (r.path === "/api/v1/cluster/status") {
      statusReads++;
      if (refuse) return { status: 403, body: { error: "no cluster:read", code: "forbidden" } };
      return {
        status: 200,
        body: {
          shard_count: 2,
          nodes: [
            { node_id: 1, http_address: a.addr, status: "up" },
            { node_id: 2, http_address: b.addr, status: "up" },
          ],
          shards: [
            { shard_id: 0, leader_node: 1, placed_nodes: [1] },
            { shard_id: 1, leader_node: 2, placed_nodes: [2] },
          ],
        },
      };
    }
    if (r.path.startsWith("/api/v1/jobs/")) return { status: 200, body: { id: r.path.split("/").at(-1) } };
  });
  try {
    const c = new Client(a.url);
    await c.job("job_1_01HX"); // the first routed request starts reading the placement, and goes the usual way
    assert.equal(a.count("/api/v1/jobs/job_1_01HX"), 1);
    await until("the placement", () => statusReads === 1);
    await new Promise((r) => setImmediate(r));
    refuse = true;
    await c.job("job_1_01HX"); // now routed to shard 1's node, which says it forwarded it
    assert.equal(b.count("/api/v1/jobs/job_1_01HX"), 1);
    // Read again at most every 2 s: each forwarded answer asks for it.
    await until("the placement read again after a forwarded answer", async () => {
      await c.job("job_1_01HX");
      return statusReads === 2;
    });
    const before = a.count("/api/v1/jobs/job_1_01HX");
    await until("routing off once the 403 is read", async () => {
      await c.job("job_1_01HX");
      return a.count("/api/v1/jobs/job_1_01HX") > before;
    });
    const routed = b.count("/api/v1/jobs/job_1_01HX");
    await c.job("job_1_01HX");
    await c.job("job_0_01HX");
    assert.equal(b.count("/api/v1/jobs/job_1_01HX"), routed, "still routed after a 403");
    assert.equal(statusReads, 2, "read again after a 403");
  } finally {
    await a.close();
    await b.close();
  }
});

/**
 * A fetch that counts, by route, every answer and those a node gave after
 * forwarding the request, and records every fetch a request carried (a
 * fetch's, or an ack's next one): the node it went to and the queues it
 * named.
 */
function countingFetch() {
  const counts = { forwarded: {}, total: {} };
  const fetches = [];
  const f = async (url, init) => {
    const u = new URL(url);
    if ((u.pathname === "/api/v1/fetch" || u.pathname.startsWith("/api/v1/ack/")) && typeof init?.body === "string") {
      const body = JSON.parse(init.body);
      const queues = body.fetch ? body.fetch.queues : body.queues;
      if (queues?.length > 0) fetches.push({ node: u.origin, queues });
    }
    const res = await fetch(url, init);
    let route = new URL(url).pathname;
    if (route.startsWith("/api/v1/ack/") && route !== "/api/v1/ack/batch") route = "/api/v1/ack/{id}";
    if (route.startsWith("/api/v1/jobs/")) route = "/api/v1/jobs/{id}";
    counts.total[route] = (counts.total[route] ?? 0) + 1;
    if (res.headers.get(ForwardedHeader)) counts.forwarded[route] = (counts.forwarded[route] ?? 0) + 1;
    return res;
  };
  return { counts, fetches, fetch: f };
}

/**
 * Starts a 3-node cluster of 6 shards on one node each (--replicas 1),
 * two led by each node; answers its nodes once the shards are spread.
 * The caller stops them.
 */
async function startSpreadCluster(nodes) {
  nodes.push(await startServer(["--node-id", "a", "--replicas", "1", "--shards", "6"]));
  const join = nodes[0].url.slice("http://".length);
  nodes.push(await startServer(["--node-id", "b", "--join", join]));
  nodes.push(await startServer(["--node-id", "c", "--join", join]));
  const admin = new Client(nodes[0].url, { placement: false });
  await until(
    "the shards to spread over the nodes",
    async () => {
      const st = await admin.clusterStatus();
      return (
        st.nodes.length === 3 &&
        st.shards.length === 6 &&
        st.nodes.every((n) => n.status === "up" && n.leader_of.length === 2) &&
        st.shards.every((sh) => sh.leader_node !== 0 && sh.placed_nodes.length === 1 && sh.placed_nodes[0] === sh.leader_node && sh.settled === true)
      );
    },
    180_000,
  );
  return nodes;
}

test("on a real 3-node cluster, a client that knows the placement has no enqueue, ack or job read forwarded; a worker over every node's queues gets each job once, fetching from each node only the queues it leads", { timeout: 240_000 }, async () => {
  const nodes = [];
  try {
    await startSpreadCluster(nodes);
    // One queue per shard: every node hosts two of them.
    const queuesOf = (prefix) => {
      const qs = new Array(6);
      for (let i = 0, found = 0; found < 6; i++) {
        const q = `${prefix}.q${i}`;
        const sh = shardForQueue(q, 6);
        if (!qs[sh]) {
          qs[sh] = q;
          found++;
        }
      }
      return qs;
    };
    const perQueue = 20;
    const load = async (c, queues) => {
      const ids = new Set();
      await Promise.all(
        Array.from({ length: 8 }, async (_, g) => {
          for (let i = g; i < perQueue * queues.length; i += 8) ids.add((await c.enqueue({ queue: queues[i % queues.length], payload: { i } })).job_id);
        }),
      );
      return ids;
    };

    // Without the placement, through one node: enqueues are forwarded.
    const off = countingFetch();
    await load(new Client(nodes[0].url, { placement: false, fetch: off.fetch }), queuesOf("plain"));
    assert.ok((off.counts.forwarded["/api/v1/enqueue"] ?? 0) + (off.counts.forwarded["/api/v1/enqueue/batch"] ?? 0) > 0, JSON.stringify(off.counts));

    const on = countingFetch();
    const c = new Client(nodes[0].url, { fetch: on.fetch });
    await c.discover();
    const queues = queuesOf("place");
    const want = new Set();
    for (const q of queues) want.add((await c.enqueue({ queue: q, payload: { alone: 1 } })).job_id);
    for (const id of await load(c, queues)) want.add(id);
    assert.equal(want.size, perQueue * queues.length + queues.length);

    const seen = new Map();
    const w = new Worker(c, { concurrency: 12, fetchTimeoutMs: 2_000, handleSignals: false }); // 4 slots a node: a poller each
    for (const q of queues) w.register(q, (j) => void seen.set(j.job_id, (seen.get(j.job_id) ?? 0) + 1));
    const running = w.run();
    await until("the worker to handle every job", () => seen.size === want.size, 60_000);
    w.stop();
    await running;
    for (const [id, n] of seen) assert.equal(n, 1, `job ${id} handled ${n} times`);
    for (const id of want) {
      assert.ok(seen.has(id), `job ${id} never handled`);
      const j = await until(`job ${id} completed`, async () => {
        const j = await c.job(id);
        return j.state === "completed" && j;
      });
      assert.equal(j.attempt, 1);
    }
    for (const route of ["/api/v1/enqueue", "/api/v1/enqueue/batch", "/api/v1/ack/{id}", "/api/v1/jobs/{id}"]) {
      assert.equal(on.counts.forwarded[route] ?? 0, 0, `${route} forwarded: ${JSON.stringify(on.counts)}`);
    }
    assert.ok(on.counts.total["/api/v1/enqueue/batch"] > 0, `no coalesced batch: ${JSON.stringify(on.counts.total)}`);
    assert.ok((on.counts.total["/api/v1/ack/{id}"] ?? 0) + (on.counts.total["/api/v1/ack/batch"] ?? 0) > 0, "no ack");
    // The worker fetched from each node apart: every fetch, and every
    // fetch an ack carried, named only queues whose shard the node it
    // went to leads.
    const p = planPlacement(await c.clusterStatus(), "http://", "");
    assert.ok(on.fetches.length > 0, "no fetch seen");
    for (const f of on.fetches) {
      for (const q of f.queues) {
        const leader = p.hosts[shardForQueue(q, 6)][0];
        assert.equal(leader, f.node, `a fetch sent to ${f.node} named ${q}, on ${leader}: ${f.queues}`);
      }
    }
  } finally {
    for (const n of nodes) await n.stop();
  }
});

// A worker over queues on two nodes shares its slots between them: while
// one node's backlog holds every slot but the one the other node's poller
// waits with, a backlog arriving on the other node gets its share (a slot
// that finished a job gives its slot back for that poller when its node
// holds more than its share), instead of one slot until the first backlog
// is done. As sdk/go's TestWorkerSharesSlotsBetweenNodes.
test("on a real 3-node cluster, a worker over queues on two nodes shares its slots between their backlogs", { timeout: 240_000 }, async () => {
  const nodes = [];
  try {
    await startSpreadCluster(nodes);
    const c = new Client(nodes[0].url);
    await c.discover();
    // Two queues whose shards two different nodes lead.
    const p = planPlacement(await c.clusterStatus(), "http://", "");
    const leader = (q) => p.hosts[shardForQueue(q, 6)][0];
    const queues = [];
    for (let i = 0; queues.length < 2; i++) {
      const q = `share.q${i}`;
      if (queues.length === 0 || leader(q) !== leader(queues[0])) queues.push(q);
    }
    const enqueue = (q, n) => c.enqueueBatch(Array.from({ length: n }, (_, i) => ({ queue: q, payload: { i } })));
    const settled = 30;
    const measured = 150;
    await enqueue(queues[0], 400);
    const order = [];
    let from = 0; // where the second backlog's measure starts
    let busy;
    let done;
    const busyP = new Promise((r) => (busy = r));
    const doneP = new Promise((r) => (done = r));
    const w = new Worker(c, { concurrency: 8, fetchTimeoutMs: 2_000, handleSignals: false });
    for (const q of queues) {
      w.register(q, async (j) => {
        // A job that takes a while: the slots stay busy, so the backlog
        // that took them first would keep them.
        await new Promise((r) => setTimeout(r, 2));
        order.push(j.queue);
        if (order.length === settled) busy();
        if (from > 0 && order.length === from + measured) done();
      });
    }
    const running = w.run();
    const within = (what, promise) =>
      Promise.race([promise, new Promise((_, rej) => setTimeout(() => rej(new Error(`timed out waiting for ${what}`)), 60_000).unref())]);
    await within("the worker to take the first backlog", busyP);
    await enqueue(queues[1], 200);
    from = order.length;
    await within("the worker to handle the jobs measured", doneP);
    w.stop();
    await running;
    const n = {};
    for (const q of order.slice(from, from + measured)) n[q] = (n[q] ?? 0) + 1;
    // Its share is half the slots; one slot of eight would give it ~12 %.
    assert.ok((n[queues[1]] ?? 0) >= (measured * 3) / 10, `of the ${measured} jobs handled once ${queues[1]} had a backlog too, it had ${n[queues[1]] ?? 0} (under 30%): ${JSON.stringify(n)}`);
    console.log(`of the ${measured} jobs handled once both queues had a backlog: ${JSON.stringify(n)}`);
  } finally {
    for (const n of nodes) await n.stop();
  }
});
