import { hostname } from "node:os";
import { Client, sleep } from "./client.js";
import { BudgetExceededError, CorvoError, isNotFound, JobCancelledError, LeaseLostError, ProviderError, WorkerShutdownError } from "./errors.js";
import type { AckItem, FetchedJob, FetchRequest, HeartbeatAnswer, HeartbeatJob, Usage } from "./types.js";

/** Options of a Worker; every one has a default. */
export interface WorkerOptions {
  /** The worker's ID as the server sees it (default: hostname-pid). */
  id?: string;
  /** Default: os.hostname(). */
  hostname?: string;
  /** Jobs run at once (default 10). */
  concurrency?: number;
  /**
   * Long-poll of a fetch, ms (default 30,000, as the Go SDK's). A drain
   * closes the fetch in flight at once: the server hands back what it had
   * claimed for it (see docs/api.md, POST /api/v1/fetch).
   */
  fetchTimeoutMs?: number;
  /** One heartbeat for every running job each interval, ms (default 15,000; keep it well under the jobs' lease). */
  heartbeatIntervalMs?: number;
  /** How long a drain waits for running handlers, ms (default 30,000). */
  shutdownGraceMs?: number;
  /** Drain on SIGTERM and SIGINT while run() runs (default true). */
  handleSignals?: boolean;
  /** Called with errors the worker cannot hand to anyone (a failed ack, a server away); default: none. */
  onError?: (err: unknown) => void;
  /**
   * Keeps a job's signal unaborted when a heartbeat says the job is past a
   * per-job budget: the handler reads `ctx.budgetExceeded` instead.
   * Default false: the signal is aborted with a BudgetExceededError.
   */
  continueOverBudget?: boolean;
  /**
   * A slot whose handler took at most this long, ms, holds its next job
   * while it runs one (its ack fetches one job more), so it starts that
   * job the moment the handler returns instead of after the ack's round
   * trip. After a longer handler the slot holds nothing: a held job waits
   * for the handler before it (its lease kept by the heartbeats) for at
   * most 4×prefetchUnderMs, after which it is given back (unclaimed, its
   * attempt not counted) for any worker to run. Default 50; negative:
   * never hold. As the Go SDK's PrefetchUnder.
   */
  prefetchUnderMs?: number;
}

/** A handler: return a result (any JSON value) to ack the job, throw to fail it. */
export type Handler<P = any> = (job: FetchedJob<P>, ctx: JobContext) => unknown | Promise<unknown>;

const usageCounts = ["input_tokens", "output_tokens", "cache_creation_tokens", "cache_read_tokens", "latency_ms"] as const;

// Costs are kept to 1e-9 USD by the server: sums and differences stay on that grid.
const nanoUSD = (x: number) => Math.round(x * 1e9) / 1e9;

/** addUsage adds o's tokens, cost and latency to u; o's model and provider replace u's when set. */
function addUsage(u: Usage, o: Usage): Usage {
  const out: Usage = { ...u };
  for (const k of usageCounts) if (o[k]) out[k] = (u[k] ?? 0) + o[k]!;
  if (o.cost_usd) out.cost_usd = nanoUSD((u.cost_usd ?? 0) + o.cost_usd);
  if (o.model) out.model = o.model;
  if (o.provider) out.provider = o.provider;
  return out;
}

/** A running job's context: progress, checkpoints, usage, cancellation. */
export class JobContext {
  // The controller is made when the handler first reads `signal` (most
  // never do) or when the job is aborted.
  private ac: AbortController | null = null;
  /** @internal Why the job was aborted (undefined: it was not). */ reason: Error | undefined = undefined;
  /** @internal */ lastProgress: unknown = undefined;
  /** @internal */ lastCheckpoint: unknown = undefined;
  /** @internal */ exit = false;
  /** @internal Its handler was called: at the end of the drain's grace a started job is failed, one held and never started is given back. */
  started = false;
  // The attempt's usage so far (reportUsage); what a heartbeat the server
  // applied reported of it, and what the one in flight reports.
  private used: Usage = {};
  private reported = false;
  /** @internal */ hbUsage: Usage = {};
  /** @internal */ hbSent: Usage = {};
  private overBudget = false;

  /** @internal */
  constructor(
    private readonly w: Worker,
    /** The job. */ readonly job: FetchedJob,
  ) {
    this.lastCheckpoint = job.checkpoint ?? undefined;
  }

  /**
   * Aborted when the server cancels the job (reason JobCancelledError), the
   * lease is lost (LeaseLostError), a heartbeat says the job is past a
   * per-job budget (BudgetExceededError, unless the worker's
   * continueOverBudget) or the drain's grace runs out (WorkerShutdownError).
   */
  get signal(): AbortSignal {
    if (!this.ac) {
      this.ac = new AbortController();
      if (this.reason) this.ac.abort(this.reason);
    }
    return this.ac.signal;
  }

  /** True once the job's signal is aborted: stop, the server has moved on. */
  get cancelled(): boolean {
    return this.reason !== undefined;
  }

  /** @internal Aborts the job's signal (once). */
  abort(reason: Error): void {
    if (this.reason) return;
    this.reason = reason;
    this.ac?.abort(reason);
  }

  /**
   * Records progress (any JSON value; `{current, total, message}` is what
   * the UI and the job's timeline show as "450/1000 Sending batch"). It
   * travels with the next heartbeat, or with the next checkpoint if that
   * comes first.
   */
  progress(value: unknown): void {
    this.lastProgress = value;
  }

  /**
   * Stores resumable state on the server now (it extends the lease too,
   * and carries the progress recorded since); a retried job gets it back
   * as `job.checkpoint`.
   */
  async checkpoint(value: unknown): Promise<void> {
    this.lastCheckpoint = value;
    const hb: HeartbeatJob = { attempt: this.job.attempt, checkpoint: value };
    if (this.lastProgress !== undefined) hb.progress = this.lastProgress;
    const st = await this.w.client.heartbeatAnswers(this.w.id, { [this.job.job_id]: hb });
    this.w.apply(st);
  }

  /** Makes the ack of a chain step skip the chain's remaining steps (step_status "exit"). */
  exitChain(): void {
    this.exit = true;
  }

  /**
   * Adds what an LLM call of the job used to the attempt's usage:
   * heartbeats carry the running total (the server keeps the attempt's
   * latest), and the job's ack or fail carries what no applied heartbeat
   * has reported yet, so the server's totals come out exact.
   */
  reportUsage(u: Usage): void {
    this.used = addUsage(this.used, u);
    this.reported = true;
  }

  /** The attempt's usage reported so far. */
  get usage(): Usage {
    return { ...this.used };
  }

  /** True once a heartbeat has said the job's cost (all its attempts) is past a per-job budget covering it. */
  get budgetExceeded(): boolean {
    return this.overBudget;
  }

  /** @internal The usage a heartbeat carries now (undefined: none reported), remembered as the one in flight. */
  heartbeatUsage(): Usage | undefined {
    if (!this.reported) return undefined;
    this.hbSent = { ...this.used };
    return this.hbSent;
  }

  /** @internal What the job's ack or fail must report: the usage no applied heartbeat reported (undefined: none). */
  usageLeft(): Usage | undefined {
    if (!this.reported) return undefined;
    const u: Usage = {};
    for (const k of usageCounts) {
      const d = (this.used[k] ?? 0) - (this.hbUsage[k] ?? 0);
      if (d > 0) u[k] = d;
    }
    const cost = nanoUSD((this.used.cost_usd ?? 0) - (this.hbUsage.cost_usd ?? 0));
    if (cost > 0) u.cost_usd = cost;
    const nothing = Object.keys(u).length === 0;
    if (this.used.model) u.model = this.used.model;
    if (this.used.provider) u.provider = this.used.provider;
    if (nothing && Object.keys(this.hbUsage).length > 0) return undefined; // the heartbeats reported it all
    return u;
  }

  /** @internal A heartbeat said the job is past a per-job budget. */
  markOverBudget(): void {
    this.overBudget = true;
  }
}

interface PendingAck {
  ack: AckItem;
  g: FetchGroup; // the slot's: its next jobs come from the group's queues
  want: number; // jobs its fetch asks for the slot: its next, and one to hold
  next: (jobs: JobContext[]) => void; // what came, registered as running
}

// A worker over queues on several nodes of a cluster fetches from each
// node apart (as the Go SDK's, sdk/go/groups.go): its queues are grouped
// by the node leading their shard, and each group has a poller that
// long-polls that node for the group's queues alone, so every fetch is one
// the node answers itself instead of a fetch the node must spread over the
// others (a claim and a wait on every other node per fetch). An ack's
// fetch names its job's group, whose node the ack goes to. The worker's
// slots are shared: a group's poller holds one slot while its node has
// nothing (so a job there is delivered at once) and takes more as its
// answers come back full, and a slot that finished a job goes on fetching
// from its group unless another group's poller waits for a slot and this
// group holds more than its share of them: then the slot is given back for
// that poller (fairness between nodes, as the server's rotation gives it
// between the queues of one fetch). Without the placement (one node, or
// `placement: false`) there is one group: every queue, fetched as before.

/** The worker's queues whose shards one node leads. */
interface FetchGroup {
  node: string; // the node's base URL ("": not routed)
  queues: string[];
  // waiting: its poller waits for a free slot; chains: slots running its
  // jobs (each fetching its next one from the group on its ack).
  waiting: number;
  chains: number;
}

/** A poller's wait for a free slot: answered true with the slot, false when the poller is to stop. */
interface SlotWait {
  gen: Grouping;
  take: (got: boolean) => void;
}

/** One grouping of the worker's queues; over once it is replaced (or the worker drains). */
interface Grouping {
  groups: FetchGroup[];
  over: boolean;
}

/** Whether two groupings put the same queues on the same nodes. */
function sameGroups(a: FetchGroup[], b: FetchGroup[]): boolean {
  const same = (x: string[], y: string[]) => x.length === y.length && x.every((q, i) => q === y[i]);
  return a.length === b.length && a.every((x, i) => x.node === b[i].node && same(x.queues, b[i].queues));
}

/** Splits a batch of acks by the slots' groups, in order. */
function byGroup(batch: PendingAck[]): PendingAck[][] {
  const parts = new Map<FetchGroup, PendingAck[]>();
  for (const p of batch) {
    const part = parts.get(p.g);
    if (part) part.push(p);
    else parts.set(p.g, [p]);
  }
  return [...parts.values()];
}

// How often a running worker checks whether its queues' nodes changed (a
// leader moved, a node left).
const regroupEveryMs = 1_000;

// As the Go SDK's completer (sdk/go/completer.go).
const ackWindowMs = 1;
const maxAckBatch = 1000;
const maxAckRequests = 4;

/**
 * Fetches jobs of its registered queues and runs their handlers.
 *
 * ```ts
 * const worker = new Worker(new Client("http://localhost:8080"), { concurrency: 10 });
 * worker.register("emails.send", async (job, ctx) => { … return { sent: true }; });
 * await worker.run(); // until SIGTERM/SIGINT or worker.stop(): then drains
 * ```
 */
export class Worker {
  readonly client: Client;
  /** The worker's ID as the server sees it. */
  readonly id: string;
  private readonly opt: Required<Omit<WorkerOptions, "id" | "onError">> & Pick<WorkerOptions, "onError">;
  private readonly handlers = new Map<string, Handler>();
  private readonly inflight = new Map<string, JobContext>();
  // The grouping the pollers fetch for (Worker.keep reads it), and the
  // pollers waiting for a free slot, first come first served.
  private grouping: Grouping = { groups: [], over: false };
  private slotWaits: SlotWait[] = [];
  private draining = false;
  private stopFetch = new AbortController();
  private drainStarted = 0;
  private plainAcks = false;
  private plainBatch = false;
  // The completer: acks gathered while handlers run, sent together.
  private acks: PendingAck[] = [];
  private ackTimer: NodeJS.Timeout | null = null;
  private ackRequests = 0;
  private ackIdle: (() => void) | null = null;
  private slotsUsed = 0;
  private readonly slots = new Set<Promise<void>>(); // running jobs, one chain each
  // Settles when the heartbeat in flight is answered (null: none in
  // flight): a finished job's usage waits for it (usageLeft).
  private hbRound: Promise<void> | null = null;

  constructor(client: Client, opts: WorkerOptions = {}) {
    this.client = client;
    const host = opts.hostname ?? hostname();
    this.id = opts.id ?? `${host}-${process.pid}`;
    this.opt = {
      hostname: host,
      concurrency: opts.concurrency && opts.concurrency > 0 ? opts.concurrency : 10,
      fetchTimeoutMs: opts.fetchTimeoutMs && opts.fetchTimeoutMs > 0 ? opts.fetchTimeoutMs : 30_000,
      heartbeatIntervalMs: opts.heartbeatIntervalMs && opts.heartbeatIntervalMs > 0 ? opts.heartbeatIntervalMs : 15_000,
      shutdownGraceMs: opts.shutdownGraceMs && opts.shutdownGraceMs > 0 ? opts.shutdownGraceMs : 30_000,
      handleSignals: opts.handleSignals ?? true,
      continueOverBudget: opts.continueOverBudget ?? false,
      prefetchUnderMs: opts.prefetchUnderMs === undefined || opts.prefetchUnderMs === 0 ? 50 : opts.prefetchUnderMs,
      onError: opts.onError,
    };
  }

  /** Sets the handler of a queue (before run). */
  register<P = any>(queue: string, handler: Handler<P>): this {
    this.handlers.set(queue, handler as Handler);
    return this;
  }

  /** How many handlers are running. */
  get running(): number {
    return this.inflight.size;
  }

  /**
   * Fetches and runs jobs until stop() (or SIGTERM/SIGINT with
   * handleSignals), then drains: stops fetching, lets running handlers
   * finish for up to shutdownGraceMs, and fails the rest with
   * "worker_shutdown" and their last checkpoint, so the server retries them
   * from there. The fetch in flight is closed at once (the server hands
   * back what it claimed for it). Resolves once drained.
   */
  async run(): Promise<void> {
    if (this.handlers.size === 0) throw new Error("corvo: no handler registered");
    const queues = [...this.handlers.keys()];
    const onSignal = () => void this.stop();
    if (this.opt.handleSignals) {
      process.on("SIGTERM", onSignal);
      process.on("SIGINT", onSignal);
    }
    const hb = this.heartbeatLoop();
    const pollers = new Set<Promise<void>>();
    try {
      // The placement before the first fetch (at most placementTimeoutMs;
      // without it the worker starts with one group and regroups once it
      // is known).
      await this.client.placementNow(this.stopFetch.signal);
      let groups = this.group(queues);
      while (!this.draining) {
        const gen: Grouping = { groups, over: false };
        this.grouping = gen;
        for (const g of groups) {
          const p = this.poll(gen, g, groups.length > 1);
          pollers.add(p);
          void p.then(() => pollers.delete(p));
        }
        groups = await this.regroup(queues, groups);
        // Replaced: its pollers waiting for a slot stop now; a fetch under
        // way is still answered and its jobs run (so no claimed job is
        // left behind), and the new pollers start at once beside it.
        gen.over = true;
        this.endWaits(gen);
      }
      // Drain: the fetches in flight were closed (stop), and what they
      // claimed was handed back; then the running jobs.
      await Promise.all(pollers);
      const all = Promise.all(this.slots);
      let timer: NodeJS.Timeout | undefined;
      const left = this.drainStarted + this.opt.shutdownGraceMs - Date.now();
      const graceOver = new Promise<"grace">((r) => (timer = setTimeout(() => r("grace"), Math.max(left, 0))));
      const first = await Promise.race([all.then(() => "done" as const), graceOver]);
      clearTimeout(timer);
      if (first === "grace") await this.failRemaining();
      await this.acksSettled();
    } finally {
      if (this.opt.handleSignals) {
        process.off("SIGTERM", onSignal);
        process.off("SIGINT", onSignal);
      }
      this.hbStop?.();
      await hb;
    }
  }

  /** Starts the drain (as SIGTERM does); run() resolves once it is over. */
  stop(): void {
    if (this.draining) return;
    this.draining = true;
    this.drainStarted = Date.now();
    // Closes the fetches in flight, ends a back-off sleep and the wait
    // for the placement or the next regrouping.
    this.stopFetch.abort(new WorkerShutdownError());
    this.grouping.over = true;
    this.endWaits();
    this.flushAcks();
  }

  private fetchBody(g: FetchGroup, count: number, timeout: number): FetchRequest {
    return { queues: g.queues, worker_id: this.id, hostname: this.opt.hostname, timeout, count };
  }

  // ---- fetch groups: a poller per node (see FetchGroup)

  /** queues grouped by the node leading their shard (one group of all of them without the placement). */
  private group(queues: string[]): FetchGroup[] {
    return this.client.groupQueues(queues, this.opt.concurrency).map((g) => ({ ...g, waiting: 0, chains: 0 }));
  }

  /** Answers a new grouping of queues once it differs from cur (checked every regroupEveryMs), or cur once the worker drains. */
  private async regroup(queues: string[], cur: FetchGroup[]): Promise<FetchGroup[]> {
    while (!this.draining) {
      try {
        await sleep(regroupEveryMs, this.stopFetch.signal);
      } catch {
        break;
      }
      const next = this.group(queues);
      if (!sameGroups(next, cur)) return next;
    }
    return cur;
  }

  /** Takes a free slot for a poller of gen, waiting for one if none is; false: the poller is to stop instead. */
  private takeSlot(gen: Grouping): Promise<boolean> | boolean {
    if (gen.over || this.draining) return false;
    if (this.slotsUsed < this.opt.concurrency) {
      this.slotsUsed++;
      return true;
    }
    return new Promise((take) => this.slotWaits.push({ gen, take }));
  }

  /** Frees a slot: the first poller waiting for one takes it over. */
  private freeSlot(): void {
    const w = this.slotWaits.shift();
    if (w) w.take(true);
    else this.slotsUsed--;
  }

  /** Stops the pollers of gen (every poller when none given) that wait for a slot. */
  private endWaits(gen?: Grouping): void {
    const left: SlotWait[] = [];
    for (const w of this.slotWaits) {
      if (!gen || w.gen === gen) w.take(false);
      else left.push(w);
    }
    this.slotWaits = left;
  }

  /**
   * Group g's poller: it leases as many jobs as it holds free slots
   * (shared: starting from one, twice as many after each full answer, as
   * many as came after a short one; alone: every free slot) and starts a
   * slot for each, until the worker drains or its grouping is replaced (a
   * fetch under way is still answered and its jobs run, so no claimed job
   * is left behind).
   */
  private async poll(gen: Grouping, g: FetchGroup, shared: boolean): Promise<void> {
    let want = shared ? 1 : this.opt.concurrency;
    while (!gen.over && !this.draining) {
      g.waiting++;
      const got = await this.takeSlot(gen);
      g.waiting--;
      if (!got) return;
      let free = 1;
      while (free < want && this.slotsUsed < this.opt.concurrency) {
        this.slotsUsed++;
        free++;
      }
      let jobs: FetchedJob[] = [];
      try {
        // A drain closes it: the server hands back what it claimed for it.
        jobs = await this.client.fetch(this.fetchBody(g, free, this.opt.fetchTimeoutMs / 1000), { signal: this.stopFetch.signal });
      } catch (err) {
        if (!this.draining) {
          this.opt.onError?.(err);
          await sleep(500, this.stopFetch.signal).catch(() => {}); // the server is away: try again shortly
        }
      }
      for (let i = jobs.length; i < free; i++) this.freeSlot();
      if (this.draining) {
        await this.handBack(jobs);
        for (let i = 0; i < jobs.length; i++) this.freeSlot();
        return;
      }
      if (shared) want = jobs.length === free ? Math.min(2 * free, this.opt.concurrency) : Math.max(jobs.length, 1);
      // Every job of the answer counts as running before the first
      // handler finishes (handle registers it before its first await): a
      // handler that finishes at once must not find the worker idle and
      // send its ack alone (see scheduleAcks).
      for (const j of jobs) {
        g.chains++;
        const p = this.slot(this.track(j), g);
        this.slots.add(p);
        void p.then(() => this.slots.delete(p));
      }
    }
  }

  /**
   * How many of n slots that just finished a job of group g go on fetching
   * from it: all of them unless another group's poller waits for a slot
   * while g holds more than its share (the slots over all the groups that
   * hold or want some); those beyond the share are given back.
   */
  private keep(g: FetchGroup, n: number): number {
    const groups = this.grouping.groups;
    if (groups.length < 2) return n;
    let hungry = false;
    let active = 0;
    for (const o of groups) {
      if (o.waiting > 0 || o.chains > 0) active++;
      hungry ||= o !== g && o.waiting > 0;
    }
    if (!hungry) return n;
    const share = Math.max(Math.floor(this.opt.concurrency / Math.max(active, 1)), 1);
    const excess = g.chains - share;
    return Math.max(Math.min(n, n - excess), 0);
  }

  /** Registers a claimed job as running: heartbeats carry it from now on. */
  private track(job: FetchedJob): JobContext {
    const ctx = new JobContext(this, job);
    this.inflight.set(job.job_id, ctx);
    return ctx;
  }

  /**
   * Runs jobs of group g on one slot (as the Go SDK's Worker.runSlot):
   * first, then the ones its acks bring. Each ack fetches the slot's next
   * job from the group, and, after a handler of at most prefetchUnderMs,
   * one more that the slot holds and starts as soon as its next handler
   * returns, while that ack is in flight. At most one ack in flight.
   */
  private async slot(first: JobContext, g: FetchGroup): Promise<void> {
    let ready: JobContext[] = [first];
    let answer: Promise<JobContext[]> | null = null;
    try {
      for (;;) {
        let ctx: JobContext | undefined;
        while (!ctx && ready.length > 0) {
          const c = ready.shift()!;
          if (await this.startable(c)) ctx = c;
        }
        if (!ctx) {
          if (!answer) return;
          ready = await answer;
          answer = null;
          continue;
        }
        // Held jobs wait for this handler for at most 4×prefetchUnderMs: a
        // slower one has them given back (unclaimed) for any worker to run.
        let gaveBack: Promise<void> | null = null;
        const timer =
          ready.length > 0 || answer
            ? setTimeout(() => {
                const held = ready;
                const inFlight = answer;
                ready = [];
                answer = null;
                gaveBack = (async () => this.giveBack([...held, ...(inFlight ? await inFlight : [])]))();
              }, 4 * this.opt.prefetchUnderMs)
            : undefined;
        const { ack, took } = await this.handle(ctx);
        clearTimeout(timer);
        if (gaveBack) await gaveBack;
        if (!ack) continue;
        if (answer) {
          ready.push(...(await answer));
          answer = null;
        }
        let want = ready.length === 0 ? 1 : 0;
        if (ready.length <= 1 && this.opt.prefetchUnderMs >= 0 && took <= this.opt.prefetchUnderMs) want++;
        const p = new Promise<JobContext[]>((next) => {
          this.acks.push({ ack, g, want, next });
          this.scheduleAcks();
        });
        if (ready.length === 0) ready = await p;
        else answer = p;
      }
    } finally {
      g.chains--;
      this.freeSlot();
    }
  }

  /**
   * Whether a job claimed for a slot may start; one that may not leaves the
   * running set: dropped when the server moved on from it (cancelled, lease
   * lost), given back when the worker drains.
   */
  private async startable(ctx: JobContext): Promise<boolean> {
    const why = ctx.reason;
    const moved = why instanceof JobCancelledError || why instanceof LeaseLostError;
    if (!this.draining && !moved) return true;
    await this.giveBack([ctx]);
    return false;
  }

  /**
   * Takes jobs claimed for a slot out of the running set and hands them back
   * to the server unstarted, but for those it moved on from (cancelled,
   * lease lost) and those the drain failed already.
   */
  private async giveBack(ctxs: JobContext[]): Promise<void> {
    const back: FetchedJob[] = [];
    for (const ctx of ctxs) {
      if (this.inflight.get(ctx.job.job_id) !== ctx) continue; // failed by the drain already
      this.inflight.delete(ctx.job.job_id);
      const why = ctx.reason;
      if (!(why instanceof JobCancelledError || why instanceof LeaseLostError)) back.push(ctx.job);
    }
    if (back.length > 0) await this.handBack(back);
  }

  /** Runs a job and reports its outcome: a failure at once, the ack for the slot to send (null: nothing to ack), with the handler's time in ms. */
  private async handle(ctx: JobContext): Promise<{ ack: AckItem | null; took: number }> {
    const job = ctx.job;
    if (this.inflight.get(job.job_id) !== ctx) return { ack: null, took: 0 }; // failed or given back by the drain already
    ctx.started = true;
    const h = this.handlers.get(job.queue);
    const start = performance.now();
    let result: unknown;
    let failure: unknown;
    let failed = false;
    try {
      if (!h) throw new Error(`no handler for queue ${job.queue}`);
      result = await h(job, ctx);
    } catch (err) {
      failed = true;
      failure = err;
    }
    const took = performance.now() - start;
    if (this.inflight.get(job.job_id) !== ctx) return { ack: null, took }; // failed by the drain already
    this.inflight.delete(job.job_id);
    const round = this.hbRound; // a heartbeat in flight may carry this job's usage
    const why = ctx.reason;
    if (why instanceof JobCancelledError || why instanceof LeaseLostError) {
      return { ack: null, took }; // the server has moved on: nothing to report
    }
    if (round) await round;
    const usage = ctx.usageLeft();
    if (failed) {
      let e = failure instanceof Error ? failure : new Error(String(failure));
      // A handler stopped by the budget's abort: the failure says why.
      if (why instanceof BudgetExceededError && (e.name === "AbortError" || e === why)) e = why;
      try {
        await this.client.fail(job.job_id, {
          error: e.message || String(failure),
          backtrace: e.stack,
          checkpoint: ctx.lastCheckpoint,
          worker_id: this.id,
          attempt: job.attempt,
          ...(usage && { usage }),
          ...(e instanceof ProviderError && { provider_error: true }),
        });
      } catch (err) {
        this.opt.onError?.(err);
      }
      return { ack: null, took };
    }
    const ack: AckItem = { job_id: job.job_id, worker_id: this.id, attempt: job.attempt };
    if (result !== undefined) ack.result = result;
    if (usage) ack.usage = usage;
    if (ctx.exit) ack.step_status = "exit";
    return { ack, took };
  }

  // ---- the completer: acks of slots that finish together share a request

  private scheduleAcks(): void {
    if (this.ackRequests >= maxAckRequests) return; // sent when a request comes back
    if (this.inflight.size === 0 || this.draining || this.acks.length >= maxAckBatch) {
      this.flushAcks(); // no handler left to finish: go now
      return;
    }
    this.ackTimer ??= setTimeout(() => this.flushAcks(), ackWindowMs);
  }

  private flushAcks(): void {
    if (this.ackTimer) {
      clearTimeout(this.ackTimer);
      this.ackTimer = null;
    }
    while (this.acks.length > 0 && this.ackRequests < maxAckRequests) {
      // One request per group: its acks go to the group's node, and fetch
      // from its queues. The parts no request is left for go first next.
      const parts = byGroup(this.acks.splice(0, maxAckBatch));
      while (parts.length > 0 && this.ackRequests < maxAckRequests) {
        this.ackRequests++;
        void this.sendAcks(parts.shift()!).finally(() => {
          this.ackRequests--;
          if (this.acks.length > 0) this.scheduleAcks();
          else if (this.ackRequests === 0) this.ackIdle?.();
        });
      }
      if (parts.length > 0) this.acks.unshift(...parts.flat());
    }
  }

  private acksSettled(): Promise<void> {
    this.flushAcks();
    if (this.ackRequests === 0 && this.acks.length === 0) return Promise.resolve();
    return new Promise((r) => (this.ackIdle = r));
  }

  /**
   * Acks a batch of one group's slots and hands each slot its jobs: the
   * first keep of them (Worker.keep) fetch what they want from the group's
   * queues, the others are given back.
   */
  private async sendAcks(batch: PendingAck[]): Promise<void> {
    const g = batch[0].g;
    const keep = this.keep(g, batch.length);
    const want = batch.slice(0, keep).reduce((n, p) => n + p.want, 0);
    let jobs: FetchedJob[] = [];
    try {
      jobs = batch.length === 1 ? await this.ackOne(batch[0].ack, g, want) : await this.ackMany(batch.map((p) => p.ack), g, want);
    } catch (err) {
      this.opt.onError?.(err);
    }
    if (this.draining && jobs.length > 0) {
      await this.handBack(jobs); // claimed as the worker began to drain
      jobs = [];
    }
    if (jobs.length > want) {
      await this.handBack(jobs.slice(want)); // more than asked for: not ours to run
      jobs = jobs.slice(0, want);
    }
    // All running before any slot has its job; each slot's next job first,
    // then the ones to hold.
    const ctxs = jobs.map((j) => this.track(j));
    const got: JobContext[][] = batch.map(() => []);
    for (let round = 0; round < 2 && ctxs.length > 0; round++) {
      batch.slice(0, keep).forEach((p, i) => {
        if (ctxs.length > 0 && p.want > round) got[i].push(ctxs.shift()!);
      });
    }
    batch.forEach((p, i) => p.next(got[i]));
  }

  /**
   * Acks a lone job of group g, with a fetch of want jobs from the
   * group's queues (none when want is 0, the worker drains or the server
   * refuses the field).
   */
  private async ackOne(a: AckItem, g: FetchGroup, want: number): Promise<FetchedJob[]> {
    const { job_id, ...body } = a;
    if (want === 0 || this.draining || this.plainAcks) {
      await this.client.ack(job_id, body);
      return [];
    }
    try {
      return (await this.client.ackAndFetch(job_id, body, this.fetchBody(g, want, 0))).jobs ?? [];
    } catch (err) {
      if (!(err instanceof CorvoError && err.status === 400)) throw err;
      this.plainAcks = true; // a server without ack-and-fetch refused the field, and acked nothing
      await this.client.ack(job_id, body);
      return [];
    }
  }

  /** Acks many jobs of group g in one request, with a fetch from the group's queues for keep of the slots they free. */
  private async ackMany(acks: AckItem[], g: FetchGroup, keep: number): Promise<FetchedJob[]> {
    let out;
    if (keep > 0 && !this.draining && !this.plainBatch) {
      try {
        out = await this.client.ackBatchAndFetch(acks, this.fetchBody(g, keep, 0));
      } catch (err) {
        if (!(err instanceof CorvoError && err.status === 400)) throw err;
        this.plainBatch = true;
      }
    }
    out ??= await this.client.ackBatch(acks);
    // An ack not committed for a reason a lone ack is retried for goes again alone.
    const byId = new Map(acks.map((a) => [a.job_id, a]));
    for (const f of out.errors ?? []) {
      if (["overloaded", "rate_limited", "unavailable", "shutting_down"].includes(f.code)) {
        const { job_id, ...body } = byId.get(f.job_id)!;
        await this.client.ack(job_id, body).catch((err) => this.opt.onError?.(err));
      }
    }
    return out.jobs ?? [];
  }

  /**
   * Gives back jobs the worker claimed but will not run: pending again at
   * once, their attempts not counted (unclaim). A server without the
   * endpoint (404) has them failed with "worker_shutdown" instead, which it
   * retries as any failure.
   */
  private async handBack(jobs: FetchedJob[]): Promise<void> {
    await Promise.all(
      jobs.map((j) =>
        this.client
          .unclaim(j.job_id, this.id, j.attempt)
          .catch((err) => {
            if (!isNotFound(err)) throw err;
            return this.client.fail(j.job_id, { error: "worker_shutdown", worker_id: this.id, attempt: j.attempt });
          })
          .catch((err) => this.opt.onError?.(err)),
      ),
    );
  }

  /**
   * Fails the jobs still running when the grace period ends, with their
   * checkpoints, and aborts their handlers; gives back the ones slots held
   * and never started (their attempts not counted, as at the drain's start).
   */
  private async failRemaining(): Promise<void> {
    const all = [...this.inflight.values()];
    this.inflight.clear();
    const left = all.filter((ctx) => ctx.started);
    const unstarted = all.filter((ctx) => !ctx.started).map((ctx) => ctx.job);
    await Promise.all([
      this.handBack(unstarted),
      ...left.map((ctx) => {
        const usage = ctx.usageLeft();
        return this.client
          .fail(ctx.job.job_id, {
            error: "worker_shutdown",
            checkpoint: ctx.lastCheckpoint,
            worker_id: this.id,
            attempt: ctx.job.attempt,
            ...(usage && { usage }),
          })
          .catch((err) => this.opt.onError?.(err));
      }),
    ]);
    for (const ctx of left) ctx.abort(new WorkerShutdownError());
  }

  // ---- heartbeats

  private hbStop: (() => void) | null = null;

  private async heartbeatLoop(): Promise<void> {
    const ac = new AbortController();
    this.hbStop = () => ac.abort();
    while (!ac.signal.aborted) {
      try {
        await sleep(this.opt.heartbeatIntervalMs, ac.signal);
      } catch {
        return;
      }
      const jobs: Record<string, HeartbeatJob> = {};
      const ctxs = new Map<string, JobContext>();
      for (const [id, ctx] of this.inflight) {
        jobs[id] = { attempt: ctx.job.attempt, progress: ctx.lastProgress, checkpoint: ctx.lastCheckpoint };
        const usage = ctx.heartbeatUsage();
        if (usage) jobs[id].usage = usage;
        ctxs.set(id, ctx);
      }
      if (ctxs.size === 0) continue;
      let done!: () => void;
      this.hbRound = new Promise<void>((r) => (done = r));
      try {
        const st = await this.client.heartbeatAnswers(this.id, jobs, { signal: ac.signal });
        for (const [id, a] of Object.entries(st)) {
          const ctx = ctxs.get(id);
          if (ctx && a.status === "ok") ctx.hbUsage = ctx.hbSent; // the server applied it
        }
        this.apply(st);
      } catch (err) {
        if (!ac.signal.aborted) this.opt.onError?.(err);
      } finally {
        this.hbRound = null;
        done();
      }
    }
  }

  /**
   * @internal Acts on heartbeat answers: cancelled or lost jobs get their
   * signal aborted, and so do jobs past a per-job budget (unless
   * continueOverBudget), which `budgetExceeded` reports from then on.
   */
  apply(st: Record<string, HeartbeatAnswer>): void {
    for (const [id, a] of Object.entries(st)) {
      const ctx = this.inflight.get(id);
      if (!ctx) continue;
      if (a.budget_exceeded) ctx.markOverBudget();
      if (ctx.reason) continue;
      if (a.status === "cancel") ctx.abort(new JobCancelledError());
      else if (a.status === "lost" || a.status === "not_found") ctx.abort(new LeaseLostError());
      else if (a.budget_exceeded && !this.opt.continueOverBudget) ctx.abort(new BudgetExceededError());
    }
  }
}
