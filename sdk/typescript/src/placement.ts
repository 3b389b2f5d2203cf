// Placement routing, as the Go SDK's (sdk/go/placement.go). A cluster
// places each shard on some of its nodes; a node that does not host a
// request's shard forwards it (one more hop). The client reads the
// placement (GET /api/v1/cluster/status: the shard count, each shard's
// leader and placed nodes, each node's address) and sends every request
// that names one queue or one job straight to a node hosting its shard:
// the leader first, then the shard's other nodes, then the client's usual
// node list (failover). A queue's shard is xxhash64(stored name) mod the
// shard count, as the server's router computes it; a job ID carries its
// shard (job_<shard>_<ULID>).
//
// The placement is read once, lazily, in the background (the first routed
// request goes the usual way), or at once by discover(), and again (at
// most every placementRefreshMs) when an answer says it was forwarded
// (X-Corvo-Forwarded), a node hosting the shard cannot be reached, or a
// routed request is answered 503. A cluster of one node, a key without
// cluster:read (403) or a server without the route turn routing off.

import type { ClusterStatus } from "./types.js";

/** Marks a request one node forwarded to another, and the answer to it. */
export const ForwardedHeader = "X-Corvo-Forwarded";
/** The least time between two reads of the placement. */
export const placementRefreshMs = 2_000;
/** How long one read of the placement may take (each of its requests, and a worker's wait for it). */
export const placementTimeoutMs = 10_000;
/**
 * A worker groups its queues by node only with at least this many slots
 * per group (the Go SDK's slotsPerGroup). Each poller holds a slot while
 * its node has nothing, so while one node has all the work the others'
 * pollers keep (groups - 1) slots from it: under a quarter of the slots
 * this way. With fewer slots the worker fetches over every queue at once.
 */
export const slotsPerGroup = 4;
/** How long a node that could not be reached is left out of routing. */
export const downForMs = 5_000;

const M64 = (1n << 64n) - 1n;
const P1 = 11400714785074694791n;
const P2 = 14029467366897019727n;
const P3 = 1609587929392839161n;
const P4 = 9650029242287828579n;
const P5 = 2870177450012600261n;

const rotl = (x: bigint, r: bigint): bigint => ((x << r) | (x >> (64n - r))) & M64;
const mul = (a: bigint, b: bigint): bigint => (a * b) & M64;
const add = (a: bigint, b: bigint): bigint => (a + b) & M64;

function round(acc: bigint, input: bigint): bigint {
  return mul(rotl(add(acc, mul(input, P2)), 31n), P1);
}

function mergeRound(acc: bigint, val: bigint): bigint {
  return add(mul(acc ^ round(0n, val), P1), P4);
}

function u64(b: Uint8Array, i: number): bigint {
  const dv = new DataView(b.buffer, b.byteOffset + i, 8);
  return dv.getBigUint64(0, true);
}

function u32(b: Uint8Array, i: number): bigint {
  return BigInt(new DataView(b.buffer, b.byteOffset + i, 4).getUint32(0, true));
}

const utf8 = new TextEncoder();

/** XXH64 with seed 0 of a string's UTF-8 bytes (github.com/cespare/xxhash/v2's Sum64String). */
export function xxhash64(s: string | Uint8Array): bigint {
  const b = typeof s === "string" ? utf8.encode(s) : s;
  const n = b.length;
  let i = 0;
  let h: bigint;
  if (n >= 32) {
    let v1 = add(P1, P2);
    let v2 = P2;
    let v3 = 0n;
    let v4 = (M64 + 1n - P1) & M64;
    for (; i + 32 <= n; i += 32) {
      v1 = round(v1, u64(b, i));
      v2 = round(v2, u64(b, i + 8));
      v3 = round(v3, u64(b, i + 16));
      v4 = round(v4, u64(b, i + 24));
    }
    h = add(add(rotl(v1, 1n), rotl(v2, 7n)), add(rotl(v3, 12n), rotl(v4, 18n)));
    h = mergeRound(h, v1);
    h = mergeRound(h, v2);
    h = mergeRound(h, v3);
    h = mergeRound(h, v4);
  } else {
    h = P5;
  }
  h = add(h, BigInt(n));
  for (; i + 8 <= n; i += 8) {
    h ^= round(0n, u64(b, i));
    h = add(mul(rotl(h, 27n), P1), P4);
  }
  if (i + 4 <= n) {
    h ^= mul(u32(b, i), P1);
    h = add(mul(rotl(h, 23n), P2), P3);
    i += 4;
  }
  for (; i < n; i++) {
    h ^= mul(BigInt(b[i]), P5);
    h = mul(rotl(h, 11n), P1);
  }
  h ^= h >> 33n;
  h = mul(h, P2);
  h ^= h >> 29n;
  h = mul(h, P3);
  h ^= h >> 32n;
  return h;
}

// Queue names repeat: their hashes are kept (up to hashCacheSize).
const hashCache = new Map<string, bigint>();
const hashCacheSize = 4096;

/**
 * The server's queue → shard rule (router.ShardForQueue) over a stored
 * queue name (a non-default namespace's queue q is stored as "ns/q"): the
 * shard index, from 0.
 */
export function shardForQueue(stored: string, shards: number): number {
  let h = hashCache.get(stored);
  if (h === undefined) {
    h = xxhash64(stored);
    if (hashCache.size >= hashCacheSize) hashCache.clear();
    hashCache.set(stored, h);
  }
  return Number(h % BigInt(shards));
}

/** The name the server stores queue q under for namespace ns (router.NamespacedQueue). */
export function storedQueue(ns: string, q: string): string {
  return ns === "" || ns === "default" ? q : ns + "/" + q;
}

/** The shard index a job ID carries (job_<shard>_<ULID>); -1 when it carries none. */
export function shardOfJobId(id: string): number {
  const m = /^job_(\d+)_/.exec(id);
  return m ? Number(m[1]) : -1;
}

/** One reading of the cluster's placement. */
export interface Placement {
  /** The namespace the client's requests act in. */
  ns: string;
  /** Shard → base URLs of its nodes that are up, leader first. */
  hosts: string[][];
}

/**
 * A cluster status as a placement: for each shard, its leader, then its
 * other placed nodes, among the nodes that are up. null when there is
 * nothing to route (a single node, no shards).
 */
export function planPlacement(st: ClusterStatus, scheme: string, ns: string): Placement | null {
  if (!(st.shard_count > 0) || !st.nodes || st.nodes.length < 2) return null;
  const addr = new Map<number, string>();
  for (const n of st.nodes) {
    if (n.http_address && (!n.status || n.status === "up")) addr.set(n.node_id, scheme + n.http_address);
  }
  const p: Placement = { ns, hosts: Array.from({ length: st.shard_count }, () => []) };
  for (const sh of st.shards ?? []) {
    const i = sh.shard_id; // numbered from 0, as in job IDs
    if (!(i >= 0 && i < st.shard_count)) continue;
    const leader = addr.get(sh.leader_node);
    if (leader) p.hosts[i].push(leader);
    for (const n of sh.placed_nodes ?? []) {
      const u = addr.get(n);
      if (u && n !== sh.leader_node) p.hosts[i].push(u);
    }
  }
  return p;
}
