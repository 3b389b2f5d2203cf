import { CorvoError, ConflictError } from "./errors.js";
import { fetchSend, httpSend, type Reply, type Send, staleConnection } from "./transport.js";
import { downForMs, ForwardedHeader, planPlacement, type Placement, placementRefreshMs, placementTimeoutMs, shardForQueue, slotsPerGroup, shardOfJobId, storedQueue } from "./placement.js";
import type {
  AckBatchResult,
  AckFetched,
  AckItem,
  AckRequest,
  APIKey,
  AuditFilter,
  AuditPage,
  BatchCallback,
  BatchEnqueued,
  BatchStatus,
  Budget,
  BudgetRequest,
  BulkAccepted,
  BulkOperation,
  BulkRequest,
  BulkResult,
  ClusterStatus,
  CreateKeyRequest,
  DeadPage,
  Enqueued,
  EnqueueRequest,
  FailRequest,
  FailResult,
  UnclaimResult,
  FetchedJob,
  FetchRequest,
  Health,
  HeartbeatAnswer,
  HeartbeatJob,
  HeartbeatStatus,
  Job,
  Moved,
  Namespace,
  Queue,
  RestoreResult,
  Role,
  Schedule,
  SearchHit,
  SearchPage,
  SearchRequest,
  StreamEvent,
  Throttle,
  UpdateKeyRequest,
  WhoAmI,
  WorkerInfo,
} from "./types.js";

/** Options of a Client. */
export interface ClientOptions {
  /** An API key ("corvo_…"), sent as `Authorization: Bearer`. */
  apiKey?: string;
  /** The namespace every call acts in (`X-Corvo-Namespace`). */
  namespace?: string;
  /**
   * How often a request answered 429 or 503, or one that could not reach
   * a server, is tried again (default 5). 429/503 wait the answer's
   * Retry-After; a node that cannot be reached moves the client to the next URL.
   */
  maxRetries?: number;
  /**
   * Coalesce concurrent enqueue() calls into POST /api/v1/enqueue/batch
   * (default true). A call made while fewer than 2 enqueue requests are
   * in flight goes out at once, alone; calls made meanwhile go together in
   * the next request.
   */
  coalesceEnqueues?: boolean;
  /** The cluster secret, for removeNode() (a node-to-node route). */
  clusterSecret?: string;
  /**
   * A fetch implementation to send every request with. Default: HTTP/1.1
   * over kept-alive node:net/node:tls connections (transport.ts; the event and progress
   * streams and backup() use the global fetch).
   */
  fetch?: typeof fetch;
  /**
   * Route each request that names one queue or one job straight to a node
   * hosting its shard, leader first (default true; see placement.ts). Off:
   * every request goes to the current URL, which forwards what it does not
   * host. Needs no setting for a single node, a load balancer that hides
   * the nodes, or a key without cluster:read: the client finds out and
   * stops routing.
   */
  placement?: boolean;
}

/** Options every call takes. */
export interface CallOptions {
  /** Aborts the call (and its retries). */
  signal?: AbortSignal;
}

interface RequestOptions extends CallOptions {
  /** Nodes hosting the request's shard, leader first: tried before the node list (placement). */
  route?: string[];
  /** Override the client's retries (0: one attempt). */
  retries?: number;
  /** Answer the body as text rather than JSON. */
  text?: boolean;
  /** A body sent as is (else JSON.stringify of the body argument). */
  raw?: boolean;
  /** Extra headers. */
  headers?: Record<string, string>;
}

interface Answer<T> {
  status: number;
  data: T;
}

/** The answer of a fetch (`count` jobs at most; none when nothing came in time). */
export type FetchedJobs = FetchedJob[];

// Coalescing bounds, as the Go SDK's (sdk/go/coalesce.go).
const maxEnqueueRequests = 2;
const maxEnqueueBatch = 1000;
const maxEnqueueBatchBytes = 1 << 20;

interface PendingEnqueue {
  queue: string;
  body: string;
  resolve: (e: Enqueued) => void;
  reject: (err: unknown) => void;
}

/** A job without scheduled_at, depends_on or a unique key: a batch answer says all its lone enqueue's would. */
function coalescable(r: EnqueueRequest): boolean {
  return r.scheduled_at === undefined && !(r.depends_on && r.depends_on.length > 0) && !r.unique_key;
}

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  if (ms <= 0 && !signal) return Promise.resolve();
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal!.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** A transport error of a request that never reached a server (nothing listens, no route): sending it elsewhere cannot apply it twice. */
function dialFailed(err: unknown): boolean {
  const e = err as { code?: string; cause?: { code?: string } } | undefined;
  const code = e?.code ?? e?.cause?.code; // node:net's, or fetch's cause
  return code === "ECONNREFUSED" || code === "EHOSTUNREACH" || code === "ENETUNREACH" || code === "ENOTFOUND" || code === "EAI_AGAIN" || code === "UND_ERR_CONNECT_TIMEOUT";
}

/** An error of a request sent on a kept-alive connection the server had closed (transport.ts). */
function stale(err: unknown): boolean {
  return typeof err === "object" && err !== null && (err as Record<symbol, unknown>)[staleConnection] === true;
}

function retryAfterMs(h: string | null): number {
  if (!h) return 0;
  const s = Number(h);
  return Number.isFinite(s) && s > 0 ? s * 1000 : 0;
}

const enc = encodeURIComponent;

function query(params: Record<string, string | number | boolean | undefined | null>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== "") q.set(k, String(v));
  }
  const s = q.toString();
  return s ? "?" + s : "";
}

/**
 * A client of a Corvo server, of a load balancer in front of a cluster, or
 * of several nodes of a cluster: when a node cannot be reached (or answers
 * 503 shutting_down) the client moves to the next URL.
 *
 * ```ts
 * const corvo = new Client("http://localhost:8080");
 * const { job_id } = await corvo.enqueue({ queue: "emails.send", payload: { to: "a@b.c" } });
 * ```
 */
export class Client {
  /** How often a 429/503 answer or an unreachable node is retried. */
  maxRetries: number;
  private nodes: string[];
  private cur = 0;
  private readonly apiKey?: string;
  private readonly namespace?: string;
  private readonly clusterSecret?: string;
  private readonly coalesce: boolean;
  private readonly fetchImpl: typeof fetch;
  private readonly send: Send;
  private senders = 0;
  private waiting: PendingEnqueue[] = [];
  // Placement routing (placement.ts).
  private placeOff: boolean;
  private placeStarted = false;
  private place: Placement | null = null;
  private placeLoading = false;
  private placeRead: Promise<void> | null = null; // the read under way
  private placeLast = 0;
  private readonly down = new Map<string, number>(); // node → until when it is left out

  /** urls: one base URL, several comma-separated, or a list. */
  constructor(urls: string | string[], opts: ClientOptions = {}) {
    const list = (Array.isArray(urls) ? urls : urls.split(","))
      .map((u) => u.trim().replace(/\/+$/, ""))
      .filter((u) => u !== "");
    if (list.length === 0) throw new Error("corvo: no server URL");
    this.nodes = list;
    this.apiKey = opts.apiKey;
    this.namespace = opts.namespace;
    this.clusterSecret = opts.clusterSecret;
    this.maxRetries = opts.maxRetries ?? 5;
    this.coalesce = opts.coalesceEnqueues ?? true;
    this.fetchImpl = opts.fetch ?? globalThis.fetch.bind(globalThis);
    this.send = opts.fetch ? fetchSend(opts.fetch) : httpSend();
    this.placeOff = opts.placement === false;
  }

  /** The base URLs the client uses, the current one first. */
  get urls(): string[] {
    const at = this.cur % this.nodes.length;
    return [...this.nodes.slice(at), ...this.nodes.slice(0, at)];
  }

  private base(): [string, number] {
    const at = this.cur;
    return [this.nodes[at % this.nodes.length], at];
  }

  /** Moves to the next node unless another request already did. */
  private failover(from: number): void {
    if (this.cur === from) this.cur = from + 1;
  }

  private headers(extra?: Record<string, string>, body?: boolean, method?: string): Record<string, string> {
    const h: Record<string, string> = { ...extra };
    if (body || method === "POST" || method === "PUT" || method === "PATCH") h["Content-Type"] = "application/json";
    if (this.apiKey) h["Authorization"] = "Bearer " + this.apiKey;
    if (this.namespace) h["X-Corvo-Namespace"] = this.namespace;
    return h;
  }

  /**
   * Sends a request to the current node; retries 429 and 503 answers after
   * their Retry-After, and requests that reached no server on the next node.
   */
  private async request<T>(method: string, path: string, body?: unknown, o: RequestOptions = {}): Promise<Answer<T>> {
    const payload = body === undefined ? undefined : o.raw ? (body as string | Uint8Array) : JSON.stringify(body);
    const retries = o.retries ?? this.maxRetries;
    const headers = this.headers(o.headers, payload !== undefined, method);
    if (o.route && o.route.length > 0) {
      const a = await this.routed<T>(o.route, method, path, payload, headers, o);
      if (a) return a;
    }
    let resent = false;
    for (let attempt = 0; ; attempt++) {
      const [base, at] = this.base();
      let res: Reply;
      try {
        res = await this.send(base, path, method, headers, payload, o.signal);
      } catch (err) {
        if (o.signal?.aborted) throw o.signal.reason ?? err;
        if (stale(err) && !resent) {
          resent = true; // a kept-alive connection the node had closed: again, at once (not a retry)
          attempt--;
          continue;
        }
        // Connection refused or reset: another node may answer.
        this.failover(at);
        if (attempt >= retries) throw err;
        await sleep(this.nodes.length > 1 && attempt < this.nodes.length ? 0 : 50 * 2 ** Math.min(attempt, 5), o.signal);
        continue;
      }
      const a = this.answer<T>(res, o);
      if (!(a instanceof CorvoError)) return a;
      const err = a;
      // A spent budget stays spent until UTC midnight: not retried.
      if ((res.status !== 429 && res.status !== 503) || err.code === "budget_exceeded" || attempt >= retries) throw err;
      let wait = err.retryAfterMs || 50 * 2 ** Math.min(attempt, 5);
      if (err.code === "shutting_down") {
        this.failover(at); // this node is stopping; another one answers at once
        wait = this.nodes.length > 1 ? 0 : wait;
      }
      await sleep(wait, o.signal);
    }
  }

  /** Reads an answer: its data, or the error it carries. */
  private answer<T>(res: Reply, o: RequestOptions): Answer<T> | CorvoError {
    if (this.place && res.header(ForwardedHeader)) this.refreshPlacement(); // sent to a node that does not host it
    const text = res.text;
    if (res.status < 400) {
      let data: unknown = undefined;
      if (o.text) data = text;
      else if (text !== "") data = JSON.parse(text);
      return { status: res.status, data: data as T };
    }
    return CorvoError.from(res.status, text, retryAfterMs(res.header("retry-after")));
  }

  /**
   * Sends a request to the first of route's nodes that answers; undefined
   * when none did, and the request goes the usual way (the node list, its
   * retries and failover). A node that cannot be reached is left out for a
   * while and the next one tried; a connection that fails once the request
   * was sent leaves the node out too, and the request goes the usual way
   * (which retries it, as it would have). Those, a 503 or an answer saying
   * it was forwarded make the client read the placement again.
   */
  private async routed<T>(
    route: string[],
    method: string,
    path: string,
    payload: string | Uint8Array | undefined,
    headers: Record<string, string>,
    o: RequestOptions,
  ): Promise<Answer<T> | undefined> {
    let resent = false;
    for (let i = 0; i < route.length; i++) {
      const node = route[i];
      let res: Reply;
      try {
        res = await this.send(node, path, method, headers, payload, o.signal);
      } catch (err) {
        if (o.signal?.aborted) throw o.signal.reason ?? err;
        if (stale(err) && !resent) {
          resent = true; // a kept-alive connection the node had closed: again, once
          i--;
          continue;
        }
        this.markDown(node);
        this.refreshPlacement();
        if (dialFailed(err)) continue;
        return undefined; // reset or closed: the usual way retries it
      }
      const a = this.answer<T>(res, o);
      if (!(a instanceof CorvoError)) return a;
      if (a.status === 503) {
        this.refreshPlacement();
        return undefined;
      }
      if (a.status === 429) return undefined; // the usual way waits its Retry-After
      throw a; // the server's answer
    }
    return undefined;
  }

  // ---- placement (placement.ts) -----------------------------------------

  /** The current placement (null: route nothing); the first call starts reading it. */
  private placement(): Placement | null {
    if (this.placeOff) return null;
    if (!this.placeStarted) {
      this.placeStarted = true;
      this.refreshPlacement();
    }
    return this.place;
  }

  /** Where a request for shard sh goes: its nodes, leader first, less those recently unreachable (undefined: the usual way). */
  private routeShard(sh: number): string[] | undefined {
    const p = this.placement();
    if (!p || sh < 0 || sh >= p.hosts.length) return undefined;
    const hosts = p.hosts[sh];
    if (this.down.size === 0) return hosts;
    const now = Date.now();
    return hosts.filter((h) => !((this.down.get(h) ?? 0) > now));
  }

  /** routeShard for queue q's shard. */
  private routeQueue(q: string): string[] | undefined {
    const p = this.placement();
    return p ? this.routeShard(shardForQueue(storedQueue(p.ns, q), p.hosts.length)) : undefined;
  }

  /** routeShard for the shard job ID id carries. */
  private routeJob(id: string): string[] | undefined {
    return this.routeShard(shardOfJobId(id));
  }

  /** The leader of the shard most of keys (queues, or job IDs when jobs) map to: a request spanning shards goes to the node answering most of it itself. */
  private routeMost(keys: string[], jobs: boolean): string[] | undefined {
    if (!this.placement() || keys.length === 0) return undefined;
    const votes = new Map<string, number>();
    let best = "";
    let bestN = 0;
    for (const k of keys) {
      const h = jobs ? this.routeJob(k) : this.routeQueue(k);
      if (!h || h.length === 0) continue;
      const n = (votes.get(h[0]) ?? 0) + 1;
      votes.set(h[0], n);
      if (n > bestN) [best, bestN] = [h[0], n];
    }
    return best ? [best] : undefined;
  }

  private markDown(node: string): void {
    this.down.set(node, Date.now() + downForMs);
  }

  /** Reads the placement again in the background, unless a read is under way or one began less than placementRefreshMs ago. */
  private refreshPlacement(): void {
    if (this.placeOff || this.placeLoading || (this.placeLast !== 0 && Date.now() - this.placeLast < placementRefreshMs)) return;
    this.placeLoading = true;
    this.placeLast = Date.now();
    this.placeRead = this.loadPlacement()
      .catch(() => {}) // failing, the old placement stays
      .finally(() => {
        this.placeLoading = false;
        this.placeRead = null;
      });
  }

  /**
   * @internal The placement, read at once if no read has been made yet
   * (or waited for while the first read is under way), for at most
   * placementTimeoutMs or until signal aborts: a worker starting on a
   * cluster groups its queues by node from its first fetch. null: nothing
   * to route (failing, there is none yet: a later read may bring it).
   */
  async placementNow(signal?: AbortSignal): Promise<Placement | null> {
    const p = this.placement(); // the first call starts the read
    const read = this.placeRead;
    if (p || !read || signal?.aborted) return p;
    let timer: NodeJS.Timeout | undefined;
    let onAbort: (() => void) | undefined;
    await new Promise<void>((r) => {
      timer = setTimeout(r, placementTimeoutMs);
      onAbort = r;
      signal?.addEventListener("abort", onAbort, { once: true });
      void read.then(() => r());
    });
    clearTimeout(timer);
    if (onAbort) signal?.removeEventListener("abort", onAbort);
    return this.placement();
  }

  /**
   * @internal Groups queues by the node leading their shard (the first
   * host of their route; "" for queues with no route), in the order of
   * each group's first queue. Without the placement, or when a worker of
   * `slots` slots would have fewer than slotsPerGroup per group: one group
   * of all of them, node "".
   */
  groupQueues(queues: string[], slots: number): { node: string; queues: string[] }[] {
    const all = [{ node: "", queues: [...queues] }];
    if (!this.placement()) return all;
    const groups: { node: string; queues: string[] }[] = [];
    const at = new Map<string, { node: string; queues: string[] }>();
    for (const q of queues) {
      const node = this.routeQueue(q)?.[0] ?? "";
      let g = at.get(node);
      if (!g) {
        g = { node, queues: [] };
        at.set(node, g);
        groups.push(g);
      }
      g.queues.push(q);
    }
    return groups.length > 1 && slots < slotsPerGroup * groups.length ? all : groups;
  }

  /** Reads the placement (st: a cluster status read already) and makes it the client's. */
  private async loadPlacement(st?: ClusterStatus): Promise<void> {
    if (!st) {
      try {
        // Through the node list, without waiting out a Retry-After.
        for (let i = 0; ; i++) {
          try {
            st = await this.call<ClusterStatus>("GET", "/api/v1/cluster/status", undefined, { retries: 0, signal: AbortSignal.timeout(placementTimeoutMs) });
            break;
          } catch (err) {
            if (err instanceof CorvoError || i + 1 >= this.nodes.length) throw err;
          }
        }
      } catch (err) {
        if (err instanceof CorvoError && (err.status === 401 || err.status === 403 || err.status === 404)) {
          this.placeOff = true; // the cluster cannot tell us: route nothing
          this.place = null;
        }
        throw err;
      }
    }
    let ns = this.namespace ?? "";
    if (ns === "" && this.apiKey) {
      ns = (await this.call<WhoAmI>("GET", "/api/v1/auth/whoami", undefined, { retries: 0, signal: AbortSignal.timeout(placementTimeoutMs) })).namespace; // the key's own
    }
    const [cur] = this.base();
    this.place = planPlacement(st, cur.startsWith("https://") ? "https://" : "http://", ns);
  }

  private async call<T>(method: string, path: string, body?: unknown, o?: RequestOptions): Promise<T> {
    return (await this.request<T>(method, path, body, o)).data;
  }

  // ---- producers -------------------------------------------------------

  /**
   * Enqueues a job. Concurrent calls are coalesced: a call made while
   * fewer than 2 enqueue requests of this client are in flight goes out at
   * once, alone (no added latency); calls made meanwhile are sent together
   * as the next POST /api/v1/enqueue/batch. Each call still gets its own
   * answer or error; a job the batch did not settle is sent again alone.
   * Jobs with scheduled_at, depends_on or a unique_key always go alone.
   */
  enqueue(job: EnqueueRequest, o?: CallOptions): Promise<Enqueued> {
    if (!this.coalesce || !coalescable(job) || o?.signal) {
      return this.call<Enqueued>("POST", "/api/v1/enqueue", job, { ...o, route: this.routeQueue(job.queue) });
    }
    const body = JSON.stringify(job);
    return new Promise<Enqueued>((resolve, reject) => {
      const p: PendingEnqueue = { queue: job.queue, body, resolve, reject };
      if (this.senders >= maxEnqueueRequests) {
        this.waiting.push(p);
        return;
      }
      this.senders++;
      void this.sendLoop([p]);
    });
  }

  private async sendLoop(batch: PendingEnqueue[]): Promise<void> {
    while (batch.length > 0) {
      await this.sendEnqueues(batch);
      batch = this.takeWaiting();
    }
    this.senders--;
  }

  /** The waiting calls that fit in one request. */
  private takeWaiting(): PendingEnqueue[] {
    let n = 0;
    let size = 0;
    while (n < this.waiting.length && n < maxEnqueueBatch && (n === 0 || size + this.waiting[n].body.length <= maxEnqueueBatchBytes)) {
      size += this.waiting[n].body.length + 1;
      n++;
    }
    return this.waiting.splice(0, n);
  }

  private alone(p: PendingEnqueue): Promise<void> {
    return this.request<Enqueued>("POST", "/api/v1/enqueue", p.body, { raw: true, route: this.routeQueue(p.queue) }).then(
      (a) => p.resolve(a.data),
      (err) => p.reject(err),
    );
  }

  /**
   * Sends coalesced enqueues: with a placement, one batch per node hosting
   * their queues' shards (in parallel), so that none takes a forwarding hop.
   */
  private async sendEnqueues(batch: PendingEnqueue[]): Promise<void> {
    if (!this.placement()) return this.sendEnqueuesTo(undefined, batch);
    const groups = new Map<string, { route: string[] | undefined; jobs: PendingEnqueue[] }>();
    for (const p of batch) {
      const route = this.routeQueue(p.queue);
      const key = route?.[0] ?? "";
      let g = groups.get(key);
      if (!g) groups.set(key, (g = { route, jobs: [] }));
      g.jobs.push(p);
    }
    await Promise.all([...groups.values()].map((g) => this.sendEnqueuesTo(g.route, g.jobs)));
  }

  /** Sends jobs to route's first node (undefined: the current node) as one batch (one job: a plain enqueue); whatever the batch does not settle, each job settles alone. */
  private async sendEnqueuesTo(route: string[] | undefined, batch: PendingEnqueue[]): Promise<void> {
    if (batch.length === 1) return this.alone(batch[0]);
    const body = '{"jobs":[' + batch.map((p) => p.body).join(",") + "]}";
    let ids: string[] | undefined;
    let notApplied: number[] = [];
    try {
      // One attempt: a failed batch is not sent again whole (some of its
      // shards may have committed); its jobs go alone.
      const a = await this.request<BatchEnqueued>("POST", "/api/v1/enqueue/batch", body, { raw: true, retries: 0, route });
      ids = a.data.job_ids;
    } catch (err) {
      // 429/503: a shard did not commit; the answer names what was not applied.
      if (err instanceof CorvoError && (err.status === 429 || err.status === 503)) {
        const b = err.body as Partial<BatchEnqueued> | undefined;
        if (b && Array.isArray(b.job_ids) && b.job_ids.length === batch.length) {
          ids = b.job_ids;
          notApplied = b.not_applied ?? [];
        }
      }
    }
    if (!ids || ids.length !== batch.length) {
      // A refused batch stored nothing (a validation error): each job
      // alone gets its own answer. A transport error: each retried alone.
      await Promise.all(batch.map((p) => this.alone(p)));
      return;
    }
    const again = new Set(notApplied);
    const retry: Promise<void>[] = [];
    batch.forEach((p, i) => {
      if (again.has(i)) retry.push(this.alone(p));
      else p.resolve({ job_id: ids![i], status: "pending", unique_existing: false });
    });
    await Promise.all(retry);
  }

  /** Enqueues up to 10,000 jobs in one request, optionally as a batch with a callback. */
  enqueueBatch(jobs: EnqueueRequest[], batch?: BatchCallback, o?: CallOptions): Promise<BatchEnqueued> {
    const route = this.routeMost(jobs.map((j) => j.queue), false);
    return this.call("POST", "/api/v1/enqueue/batch", batch ? { jobs, batch } : { jobs }, { ...o, route });
  }

  // ---- workers ---------------------------------------------------------

  /** Long-polls for up to `count` jobs (default 1); an empty list: none came in time. */
  async fetch(r: FetchRequest, o?: CallOptions): Promise<FetchedJob[]> {
    const a = await this.request<FetchedJob | { jobs: FetchedJob[] }>("POST", "/api/v1/fetch", r, { ...o, route: this.routeMost(r.queues, false) });
    if (a.status === 204 || a.data === undefined) return [];
    if (r.count !== undefined) return (a.data as { jobs: FetchedJob[] }).jobs;
    return [a.data as FetchedJob];
  }

  /** Completes a job. `worker_id` and `attempt` make the server check the lease (409 when lost). */
  async ack(jobId: string, a: AckRequest = {}, o?: CallOptions): Promise<void> {
    await this.call("POST", "/api/v1/ack/" + enc(jobId), a, { ...o, route: this.routeJob(jobId) });
  }

  /** Completes a job and claims the worker's next jobs in the same request. A refused ack claims nothing. */
  ackAndFetch(jobId: string, a: AckRequest, fetch: FetchRequest, o?: CallOptions): Promise<AckFetched> {
    return this.call("POST", "/api/v1/ack/" + enc(jobId), { ...a, fetch }, { ...o, route: this.routeJob(jobId) });
  }

  /** Completes many jobs in one request; `errors` lists the ones that failed. */
  ackBatch(acks: AckItem[], o?: CallOptions): Promise<AckBatchResult> {
    return this.call("POST", "/api/v1/ack/batch", { acks }, { ...o, route: this.routeMost(acks.map((a) => a.job_id), true) });
  }

  /** Completes many jobs and claims up to `fetch.count` next jobs (only if an ack applied). */
  ackBatchAndFetch(acks: AckItem[], fetch: FetchRequest, o?: CallOptions): Promise<AckBatchResult> {
    return this.call("POST", "/api/v1/ack/batch", { acks, fetch }, { ...o, route: this.routeMost(acks.map((a) => a.job_id), true) });
  }

  /**
   * Gives back a job the worker claimed and will not run (one it held when
   * it began to drain): pending again at once, the attempt not counted, no
   * error recorded. `workerId` and `attempt` name the lease. A job that ran
   * and failed is a {@link fail}, not this.
   */
  unclaim(jobId: string, workerId: string, attempt: number, o?: CallOptions): Promise<UnclaimResult> {
    return this.call("POST", "/api/v1/unclaim/" + enc(jobId), { worker_id: workerId, attempt }, { ...o, route: this.routeJob(jobId) });
  }

  /** Reports a failed attempt; the server decides what follows. */
  fail(jobId: string, f: FailRequest, o?: CallOptions): Promise<FailResult> {
    return this.call("POST", "/api/v1/fail/" + enc(jobId), f, { ...o, route: this.routeJob(jobId) });
  }

  /**
   * Extends the leases of the jobs a worker holds (and stores progress and
   * checkpoints); answers each job's status: ok, cancel, lost or not_found.
   */
  async heartbeat(workerId: string, jobs: Record<string, HeartbeatJob>, o?: CallOptions): Promise<Record<string, HeartbeatStatus>> {
    const out: Record<string, HeartbeatStatus> = {};
    for (const [id, a] of Object.entries(await this.heartbeatAnswers(workerId, jobs, o))) out[id] = a.status;
    return out;
  }

  /** heartbeat with each job's whole answer: its status and whether it is past a per-job budget (`budget_exceeded`). */
  async heartbeatAnswers(workerId: string, jobs: Record<string, HeartbeatJob>, o?: CallOptions): Promise<Record<string, HeartbeatAnswer>> {
    let answer: { jobs: Record<string, HeartbeatAnswer> };
    try {
      answer = await this.call("POST", "/api/v1/heartbeat", { worker_id: workerId, jobs }, { ...o, route: this.routeMost(Object.keys(jobs), true) });
    } catch (err) {
      // No job was ok or cancelled: the 409 carries the statuses.
      const b = err instanceof ConflictError ? (err.body as typeof answer | undefined) : undefined;
      if (!b || !b.jobs) throw err;
      answer = b;
    }
    return answer.jobs ?? {};
  }

  // ---- jobs ------------------------------------------------------------

  /** Reads a job (with its timeline). */
  job<P = any>(id: string, o?: CallOptions): Promise<Job<P>> {
    return this.call("GET", "/api/v1/jobs/" + enc(id), undefined, { ...o, route: this.routeJob(id) });
  }

  /** Cancels a job: "cancelled", or "cancelling" for an active one. */
  async cancel(id: string, o?: CallOptions): Promise<string> {
    return (await this.call<{ status: string }>("POST", "/api/v1/jobs/" + enc(id) + "/cancel", undefined, { ...o, route: this.routeJob(id) })).status;
  }

  /** Sends a completed, dead or cancelled job back to pending. */
  async retry(id: string, o?: CallOptions): Promise<string> {
    return (await this.call<{ status: string }>("POST", "/api/v1/jobs/" + enc(id) + "/retry", undefined, { ...o, route: this.routeJob(id) })).status;
  }

  /** Re-files a job under another queue (a new ID when it lives on another shard). */
  move(id: string, queue: string, resetAttempt = false, o?: CallOptions): Promise<Moved> {
    return this.call("POST", "/api/v1/jobs/" + enc(id) + "/move", { queue, reset_attempt: resetAttempt }, { ...o, route: this.routeJob(id) });
  }

  /** Deletes a job in any state. */
  async deleteJob(id: string, o?: CallOptions): Promise<void> {
    await this.call("DELETE", "/api/v1/jobs/" + enc(id), undefined, { ...o, route: this.routeJob(id) });
  }

  /** Releases a held job (→ pending). */
  async approve(id: string, o?: CallOptions): Promise<string> {
    return (await this.call<{ status: string }>("POST", "/api/v1/jobs/" + enc(id) + "/approve", undefined, { ...o, route: this.routeJob(id) })).status;
  }

  /** Rejects a held job (→ dead). */
  async reject(id: string, o?: CallOptions): Promise<string> {
    return (await this.call<{ status: string }>("POST", "/api/v1/jobs/" + enc(id) + "/reject", undefined, { ...o, route: this.routeJob(id) })).status;
  }

  /** One page of the dead-letter list, most recently dead first. */
  dead(r: { queue?: string; limit?: number; cursor?: string } = {}, o?: CallOptions): Promise<DeadPage> {
    return this.call("GET", "/api/v1/dead" + query(r), undefined, o);
  }

  /** Reads a batch's counts. */
  batch(id: string, o?: CallOptions): Promise<BatchStatus> {
    return this.call("GET", "/api/v1/batches/" + enc(id), undefined, o);
  }

  // ---- search and bulk -------------------------------------------------

  /** One page of a search; pass the page's cursor back for the next one. */
  search(r: SearchRequest, o?: CallOptions): Promise<SearchPage> {
    return this.call("POST", "/api/v1/jobs/search", r, o);
  }

  /** Every page of a search, following the cursors (keyset paging: no duplicates, no gaps). */
  async *searchPages(r: SearchRequest, o?: CallOptions): AsyncGenerator<SearchPage, void, undefined> {
    let req = { ...r };
    for (;;) {
      const page = await this.search(req, o);
      yield page;
      if (!page.has_more || !page.cursor) return;
      req = { ...req, cursor: page.cursor };
    }
  }

  /** Every job a search matches, page after page: `for await (const job of client.searchAll({...}))`. */
  async *searchAll(r: SearchRequest, o?: CallOptions): AsyncGenerator<SearchHit, void, undefined> {
    for await (const page of this.searchPages(r, o)) yield* page.jobs;
  }

  /**
   * Runs a bulk action: a small one answers its result (`result`), a large
   * one (over 10,000 jobs, or `async`) is accepted and runs in the
   * background (`accepted`; follow it with watchBulk or bulkStatus).
   */
  async bulk(r: BulkRequest, o?: CallOptions): Promise<{ result?: BulkResult; accepted?: BulkAccepted }> {
    const a = await this.request<BulkResult | BulkAccepted>("POST", "/api/v1/jobs/bulk", r, o);
    return a.status === 202 ? { accepted: a.data as BulkAccepted } : { result: a.data as BulkResult };
  }

  /** Reads a background bulk operation. */
  bulkStatus(id: string, o?: CallOptions): Promise<BulkOperation> {
    return this.call("GET", "/api/v1/bulk/" + enc(id), undefined, o);
  }

  /** Stops a running bulk operation; answers its final record (409 when finished). */
  cancelBulk(id: string, o?: CallOptions): Promise<BulkOperation> {
    return this.call("DELETE", "/api/v1/bulk/" + enc(id), undefined, o);
  }

  /** This node's recent bulk operations, newest first. */
  async bulkOperations(limit = 50, o?: CallOptions): Promise<BulkOperation[]> {
    return (await this.call<{ operations: BulkOperation[] }>("GET", "/api/v1/bulk" + query({ limit }), undefined, o)).operations;
  }

  /** Follows a background bulk operation's progress stream to its end; answers the final record. */
  async watchBulk(id: string, onProgress?: (op: BulkOperation) => void, o?: CallOptions): Promise<BulkOperation> {
    for await (const f of this.sse("/api/v1/bulk/" + enc(id) + "/progress", undefined, o?.signal)) {
      const op = JSON.parse(f.data) as BulkOperation;
      if (f.event === "done") return op;
      if (f.event === "progress") onProgress?.(op);
    }
    throw new Error("corvo: the progress stream ended before the operation finished");
  }

  /** Asks the node to rebuild its search mirror in the background. */
  async rebuildMirror(o?: CallOptions): Promise<string> {
    return (await this.call<{ status: string }>("POST", "/api/v1/admin/rebuild-mirror", undefined, o)).status;
  }

  // ---- events ----------------------------------------------------------

  /**
   * The event stream: `for await (const ev of client.events({queues}))`.
   * Keep the last `ev.id` and pass it as `lastEventId` to resume exactly
   * after it. A `reset` frame says events were lost: refetch state. Break
   * out of the loop (or abort `signal`) to close the stream.
   */
  async *events(
    r: { queues?: string[]; types?: string[]; lastEventId?: string; signal?: AbortSignal; onOpen?: () => void } = {},
  ): AsyncGenerator<StreamEvent, void, undefined> {
    const path =
      "/api/v1/events" + query({ queue: r.queues?.join(","), type: r.types?.join(",") });
    for await (const f of this.sse(path, r.lastEventId, r.signal, r.onOpen)) {
      if (f.event === "job") yield { id: f.id, type: "job", job: JSON.parse(f.data) };
      else if (f.event === "reset") yield { id: f.id, type: "reset", reason: (JSON.parse(f.data) as { reason: string }).reason };
    }
  }

  /** Reads a Server-Sent Events answer frame by frame; onOpen runs when its first line arrives. */
  private async *sse(
    path: string,
    lastId?: string,
    signal?: AbortSignal,
    onOpen?: () => void,
  ): AsyncGenerator<{ id: string; event: string; data: string }, void, undefined> {
    const ac = new AbortController();
    const stop = () => ac.abort(signal?.reason);
    if (signal?.aborted) stop();
    signal?.addEventListener("abort", stop, { once: true });
    const [base, at] = this.base();
    const headers = this.headers({ Accept: "text/event-stream" });
    if (lastId) headers["Last-Event-ID"] = lastId;
    try {
      let res: Response;
      try {
        res = await this.fetchImpl(base + path, { headers, signal: ac.signal });
      } catch (err) {
        if (!ac.signal.aborted) this.failover(at); // the caller reconnects, to the next node
        throw err;
      }
      if (res.status !== 200) {
        throw CorvoError.from(res.status, await res.text(), retryAfterMs(res.headers.get("retry-after")));
      }
      if (!res.body) return;
      const decoder = new TextDecoder();
      let buf = "";
      let f = { id: "", event: "", data: "" };
      let hasData = false;
      for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
        buf += decoder.decode(chunk, { stream: true });
        let nl: number;
        while ((nl = buf.indexOf("\n")) >= 0) {
          let line = buf.slice(0, nl);
          buf = buf.slice(nl + 1);
          if (line.endsWith("\r")) line = line.slice(0, -1);
          if (onOpen) {
            onOpen();
            onOpen = undefined;
          }
          if (line === "") {
            if (f.event !== "" || hasData) yield f;
            f = { id: "", event: "", data: "" };
            hasData = false;
          } else if (line.startsWith(":")) {
            // a comment (keepalive)
          } else {
            const colon = line.indexOf(":");
            const field = colon < 0 ? line : line.slice(0, colon);
            let value = colon < 0 ? "" : line.slice(colon + 1);
            if (value.startsWith(" ")) value = value.slice(1);
            if (field === "id") f.id = value;
            else if (field === "event") f.event = value;
            else if (field === "data") {
              f.data = hasData ? f.data + "\n" + value : value;
              hasData = true;
            }
          }
        }
      }
    } finally {
      signal?.removeEventListener("abort", stop);
      ac.abort();
    }
  }

  // ---- queues ----------------------------------------------------------

  /** Every queue with its counts and settings. */
  async queues(o?: CallOptions): Promise<Queue[]> {
    return (await this.call<{ queues: Queue[] }>("GET", "/api/v1/queues", undefined, o)).queues;
  }

  /** Pauses a queue: fetches skip it. */
  pauseQueue(queue: string, o?: CallOptions): Promise<{ queue: string; paused: boolean }> {
    return this.call("POST", "/api/v1/queues/" + enc(queue) + "/pause", undefined, { ...o, route: this.routeQueue(queue) });
  }

  /** Resumes a paused queue. */
  resumeQueue(queue: string, o?: CallOptions): Promise<{ queue: string; paused: boolean }> {
    return this.call("POST", "/api/v1/queues/" + enc(queue) + "/resume", undefined, { ...o, route: this.routeQueue(queue) });
  }

  /** Deletes every pending, scheduled and retrying job of a queue. */
  clearQueue(queue: string, o?: CallOptions): Promise<{ queue: string; cleared: number }> {
    return this.call("POST", "/api/v1/queues/" + enc(queue) + "/clear", undefined, { ...o, route: this.routeQueue(queue) });
  }

  /** Pauses a queue so active jobs finish and no new ones start. */
  drainQueue(queue: string, o?: CallOptions): Promise<{ queue: string; paused: boolean; draining: boolean; active: number }> {
    return this.call("POST", "/api/v1/queues/" + enc(queue) + "/drain", undefined, { ...o, route: this.routeQueue(queue) });
  }

  /** Caps a queue's active jobs across every worker (null or 0: no cap). */
  setConcurrency(queue: string, max: number | null, o?: CallOptions): Promise<{ queue: string; max_concurrency: number | null }> {
    return this.call("POST", "/api/v1/queues/" + enc(queue) + "/concurrency", { max }, { ...o, route: this.routeQueue(queue) });
  }

  /** Limits a queue to `rate` fetches per period (null: removes the limit). */
  setThrottle(queue: string, t: Throttle | null, o?: CallOptions): Promise<{ queue: string; throttle: Throttle | null }> {
    const path = "/api/v1/queues/" + enc(queue) + "/throttle";
    const ro = { ...o, route: this.routeQueue(queue) };
    return t ? this.call("POST", path, t, ro) : this.call("DELETE", path, undefined, ro);
  }

  /** Deletes a queue, its settings and every one of its jobs. */
  deleteQueue(queue: string, o?: CallOptions): Promise<{ queue: string; deleted: boolean; jobs_deleted: number }> {
    return this.call("DELETE", "/api/v1/queues/" + enc(queue) + "?confirm=true", undefined, { ...o, route: this.routeQueue(queue) });
  }

  // ---- budgets ---------------------------------------------------------

  /** The namespace's budgets with the spend of the current UTC day. */
  async budgets(o?: CallOptions): Promise<Budget[]> {
    return (await this.call<{ budgets: Budget[] }>("GET", "/api/v1/budgets", undefined, o)).budgets;
  }

  /** Creates or replaces the budget of a scope (the day's spend is kept). */
  setBudget(b: BudgetRequest, o?: CallOptions): Promise<Budget> {
    return this.call("PUT", "/api/v1/budgets", b, o);
  }

  /** Removes the budget of a scope, and its spends. */
  async deleteBudget(scope: string, o?: CallOptions): Promise<void> {
    await this.call("DELETE", "/api/v1/budgets/" + enc(scope), undefined, o);
  }

  // ---- schedules -------------------------------------------------------

  /** Every cron schedule, by name. */
  async schedules(o?: CallOptions): Promise<Schedule[]> {
    return (await this.call<{ schedules: Schedule[] }>("GET", "/api/v1/schedules", undefined, o)).schedules;
  }

  /** Creates a schedule (no `id`) or replaces the one with `id`. */
  putSchedule(s: Schedule, o?: CallOptions): Promise<Schedule> {
    const { id, next_run: _n, last_run: _l, created_at: _c, last_job_id: _j, paused: _p, ...body } = s;
    void _n, _l, _c, _j, _p;
    return id
      ? this.call("PUT", "/api/v1/schedules/" + enc(id), body, o)
      : this.call("POST", "/api/v1/schedules", body, o);
  }

  /** Deletes a schedule. */
  async deleteSchedule(id: string, o?: CallOptions): Promise<void> {
    await this.call("DELETE", "/api/v1/schedules/" + enc(id), undefined, o);
  }

  // ---- cluster and operations -----------------------------------------

  /** Every worker heard from in the last 24 hours. */
  async workers(o?: CallOptions): Promise<WorkerInfo[]> {
    return (await this.call<{ workers: WorkerInfo[] }>("GET", "/api/v1/workers", undefined, o)).workers;
  }

  /** The cluster's nodes, shards and replicas. */
  clusterStatus(o?: CallOptions): Promise<ClusterStatus> {
    return this.call("GET", "/api/v1/cluster/status", undefined, o);
  }

  /**
   * Asks the cluster for its members and from then on spreads over every
   * node that is up, so the client survives the loss of the node it was
   * given. It also takes the cluster's placement from the same answer, so
   * that routing (the `placement` option) starts with the next request.
   */
  async discover(o?: CallOptions): Promise<string[]> {
    const st = await this.clusterStatus(o);
    const [cur] = this.base();
    const scheme = cur.startsWith("https://") ? "https://" : "http://";
    const nodes = [cur];
    for (const n of st.nodes) {
      const u = scheme + n.http_address;
      if (n.http_address && n.status === "up" && u !== cur) nodes.push(u);
    }
    this.nodes = nodes;
    this.cur = 0;
    if (!this.placeOff) {
      this.placeStarted = true;
      await this.loadPlacement(st);
    }
    return this.urls;
  }

  /** Takes a node out of the cluster (needs `clusterSecret`). */
  async removeNode(nodeId: number, o?: CallOptions): Promise<void> {
    const headers: Record<string, string> = {};
    if (this.clusterSecret) headers["X-Corvo-Cluster-Secret"] = this.clusterSecret;
    await this.call("DELETE", "/api/v1/cluster/nodes/" + nodeId, undefined, { ...o, headers });
  }

  /** GET /healthz. */
  health(o?: CallOptions): Promise<Health> {
    return this.call("GET", "/healthz", undefined, o);
  }

  /** The Prometheus metrics text. */
  metrics(o?: CallOptions): Promise<string> {
    return this.call("GET", "/api/v1/metrics", undefined, { ...o, text: true });
  }

  /** One page of the audit log, newest first. */
  audit(f: AuditFilter = {}, o?: CallOptions): Promise<AuditPage> {
    return this.call("GET", "/api/v1/audit" + query({ ...f }), undefined, o);
  }

  /**
   * Streams a backup, one record at a time (the header first, the trailer
   * last): `for await (const rec of client.backup())`.
   */
  async *backup(r: { namespace?: string; keys?: "metadata" | "full" } = {}, o?: CallOptions): AsyncGenerator<Record<string, unknown>, void, undefined> {
    const [base] = this.base();
    const res = await this.fetchImpl(base + "/api/v1/backup" + query(r), { headers: this.headers(), signal: o?.signal });
    if (res.status !== 200) throw CorvoError.from(res.status, await res.text(), retryAfterMs(res.headers.get("retry-after")));
    if (!res.body) return;
    const decoder = new TextDecoder();
    let buf = "";
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      buf += decoder.decode(chunk, { stream: true });
      let nl: number;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl).trim();
        buf = buf.slice(nl + 1);
        if (line) yield JSON.parse(line);
      }
    }
    if (buf.trim()) yield JSON.parse(buf);
  }

  /** Restores a backup (its NDJSON text), optionally into namespace `into`. */
  async restore(backup: string | Uint8Array, r: { into?: string } = {}, o?: CallOptions): Promise<RestoreResult> {
    return this.call("POST", "/api/v1/restore" + query(r), backup, { ...o, raw: true, retries: 0 });
  }

  // ---- auth ------------------------------------------------------------

  /** Who the client's key acts as. */
  whoami(o?: CallOptions): Promise<WhoAmI> {
    return this.call("GET", "/api/v1/auth/whoami", undefined, o);
  }

  /** Creates an API key; the answer holds the key itself, this once. */
  createKey(r: CreateKeyRequest, o?: CallOptions): Promise<APIKey & { key: string }> {
    return this.call("POST", "/api/v1/auth/keys", r, o);
  }

  /** Every API key (never the keys themselves). */
  async keys(o?: CallOptions): Promise<APIKey[]> {
    return (await this.call<{ keys: APIKey[] }>("GET", "/api/v1/auth/keys", undefined, o)).keys;
  }

  /** One API key's record. */
  key(id: string, o?: CallOptions): Promise<APIKey> {
    return this.call("GET", "/api/v1/auth/keys/" + enc(id), undefined, o);
  }

  /** Changes an API key's name, role, scope, state, expiry or rates. */
  updateKey(id: string, r: UpdateKeyRequest, o?: CallOptions): Promise<APIKey> {
    return this.call("PATCH", "/api/v1/auth/keys/" + enc(id), r, o);
  }

  /** Revokes an API key everywhere, for good. */
  async revokeKey(id: string, o?: CallOptions): Promise<void> {
    await this.call("DELETE", "/api/v1/auth/keys/" + enc(id), undefined, o);
  }

  /** The built-in roles, then the custom ones. */
  async roles(o?: CallOptions): Promise<Role[]> {
    return (await this.call<{ roles: Role[] }>("GET", "/api/v1/auth/roles", undefined, o)).roles;
  }

  /** One role. */
  role(name: string, o?: CallOptions): Promise<Role> {
    return this.call("GET", "/api/v1/auth/roles/" + enc(name), undefined, o);
  }

  /** Creates or replaces a custom role. */
  putRole(name: string, r: { permissions: string[]; queues?: string[] }, o?: CallOptions): Promise<Role> {
    return this.call("PUT", "/api/v1/auth/roles/" + enc(name), r, o);
  }

  /** Deletes a custom role (409 while a key has it). */
  async deleteRole(name: string, o?: CallOptions): Promise<void> {
    await this.call("DELETE", "/api/v1/auth/roles/" + enc(name), undefined, o);
  }

  /** Every namespace (admins). */
  async namespaces(o?: CallOptions): Promise<Namespace[]> {
    return (await this.call<{ namespaces: Namespace[] }>("GET", "/api/v1/namespaces", undefined, o)).namespaces;
  }

  /** Creates a namespace (admins). */
  createNamespace(name: string, description?: string, o?: CallOptions): Promise<Namespace> {
    return this.call("POST", "/api/v1/namespaces", { name, description }, o);
  }

  /** Deletes an empty namespace (admins). */
  async deleteNamespace(name: string, o?: CallOptions): Promise<void> {
    await this.call("DELETE", "/api/v1/namespaces/" + enc(name), undefined, o);
  }
}
