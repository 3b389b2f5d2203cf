// The bodies of the server's requests and answers, field for field as they
// travel (snake_case, as docs/api.md writes them). Timestamps are RFC 3339
// strings; durations are strings ("5s", "10m").

/** A priority tier. */
export type Priority = "critical" | "high" | "normal";

/** Job states. */
export type JobState = "scheduled" | "pending" | "active" | "retrying" | "completed" | "dead" | "cancelled" | "held";

/** A step (or handler) of a chain. */
export interface ChainStep {
  queue: string;
  payload?: unknown;
}

/** A sequential pipeline; the job itself is its first step. */
export interface Chain {
  steps: ChainStep[];
  on_failure?: ChainStep;
  on_exit?: ChainStep;
}

/** POST /api/v1/enqueue: a job and every option. */
export interface EnqueueRequest {
  queue: string;
  payload?: unknown;
  priority?: Priority | 0 | 1 | 2;
  /** Attempts in all (default 3); attempts_remaining = max_retries − attempt. */
  max_retries?: number;
  retry_backoff?: "none" | "fixed" | "linear" | "exponential";
  retry_base_delay?: string;
  retry_max_delay?: string;
  /** Seconds a fetched job is leased (default 60). */
  lease_duration?: number;
  /** RFC 3339 time (or a Date): the job is scheduled until then. */
  scheduled_at?: string | Date;
  expire_after?: string;
  tags?: Record<string, string>;
  unique_key?: string;
  /** Seconds the unique key stays taken (absent: until the job finishes). */
  unique_period?: number;
  depends_on?: string[];
  chain?: Chain;
  /** The models a worker may call for the job: fetches carry the one to call now (`FetchedJob.routing`). */
  routing?: Routing;
}

/** An enqueue's model routing (docs/api.md "Model routing"). */
export interface Routing {
  prefer: string;
  fallback?: string[];
  /** Default fallback_on_error. */
  strategy?: "fallback_on_error" | "round_robin" | "lowest_cost";
  /** With lowest_cost: a price for every model, in any one unit. */
  prices?: Record<string, number>;
}

/** A fetched job's routing: the model to call for this attempt and its place in the job's try order (0: the first). */
export interface RouteTarget {
  target: string;
  index: number;
}

/**
 * What a job's LLM calls used, as a worker reports it on an ack, a fail or
 * a heartbeat (every member optional). On a heartbeat it is the attempt's
 * usage so far (cumulative); on an ack or a fail, what the attempt used
 * beyond its heartbeats. The Worker works this out: handlers call
 * `ctx.reportUsage(...)`.
 */
export interface Usage {
  input_tokens?: number;
  output_tokens?: number;
  cache_creation_tokens?: number;
  cache_read_tokens?: number;
  model?: string;
  provider?: string;
  cost_usd?: number;
  latency_ms?: number;
}

/** The answer to an enqueue. */
export interface Enqueued {
  job_id: string;
  status: "pending" | "scheduled" | "held" | JobState;
  unique_existing: boolean;
}

/** A batch's callback, run when every job of the batch has finished. */
export interface BatchCallback {
  callback_queue?: string;
  callback_payload?: unknown;
}

/** The answer to a batch enqueue. */
export interface BatchEnqueued {
  job_ids: string[];
  batch_id: string | null;
  unique_existing?: boolean[];
  /** On a partial failure (the error's body): the indexes not stored. */
  not_applied?: number[];
}

/** POST /api/v1/fetch. */
export interface FetchRequest {
  queues: string[];
  worker_id?: string;
  hostname?: string;
  /** Long-poll seconds (default 0: answer at once). */
  timeout?: number;
  /** 1–1,000 jobs. */
  count?: number;
}

/** A job handed to a worker. */
export interface FetchedJob<P = any> {
  job_id: string;
  queue: string;
  payload: P;
  priority: Priority;
  attempt: number;
  max_retries: number;
  lease_duration: number;
  lease_expires_at: string | null;
  /** The last checkpoint of an earlier attempt (null: none). */
  checkpoint: any;
  tags: Record<string, string> | null;
  created_at: string;
  /** The model to call now, for a job enqueued with routing (absent otherwise). */
  routing?: RouteTarget | null;
}

/** An ack's body. `worker_id` and `attempt` make the server check the lease. */
export interface AckRequest {
  result?: unknown;
  step_status?: "continue" | "exit";
  worker_id?: string;
  attempt?: number;
  /** What the attempt used beyond its heartbeats. */
  usage?: Usage;
}

/** One ack of an ack batch. */
export interface AckItem extends AckRequest {
  job_id: string;
}

/** The answer to an ack that carried a fetch. */
export interface AckFetched {
  status: string;
  jobs: FetchedJob[];
  fetch_error?: string;
}

/** One job a many-job call could not apply. */
export interface JobFailure {
  job_id: string;
  code: string;
  error: string;
}

/** The answer to POST /api/v1/ack/batch. */
export interface AckBatchResult {
  acked: number;
  errors: JobFailure[];
  /** With a fetch: the jobs it claimed. */
  jobs?: FetchedJob[];
  fetch_error?: string;
}

/** POST /api/v1/fail/{id}. */
export interface FailRequest {
  error: string;
  backtrace?: string;
  checkpoint?: unknown;
  worker_id?: string;
  attempt?: number;
  /** What the attempt used beyond its heartbeats. */
  usage?: Usage;
  /** The model's provider failed, not the job: a job with routing moves to its next model at once. */
  provider_error?: boolean;
}

/** What the server made of a failure. */
export interface FailResult {
  status: "retrying" | "dead" | "cancelled";
  next_attempt_at?: string;
  attempts_remaining: number;
}

/** The answer to {@link Client.unclaim}. */
export interface UnclaimResult {
  /** "cancelled" when a cancel came while the job was claimed. */
  status: "pending" | "cancelled";
}

/** A held job's part of a heartbeat. */
export interface HeartbeatJob {
  attempt?: number;
  progress?: unknown;
  checkpoint?: unknown;
  /** The attempt's usage so far (cumulative: it replaces the attempt's previous heartbeat report). */
  usage?: Usage;
}

/** A job's heartbeat status. */
export type HeartbeatStatus = "ok" | "cancel" | "lost" | "not_found";

/** A job's whole heartbeat answer. */
export interface HeartbeatAnswer {
  status: HeartbeatStatus;
  /** The job's cost (all its attempts) is past a per-job budget covering it. */
  budget_exceeded?: boolean;
}

/** One failed attempt. */
export interface JobErrorEntry {
  attempt: number;
  error: string;
  backtrace: string | null;
  at: string;
  started_at: string | null;
  worker_id: string | null;
}

/** One step of a job's history. */
export interface TimelineEntry {
  at: string;
  type: string;
  attempt?: number;
  worker_id?: string;
  detail?: string;
}

/** The whole job (GET /api/v1/jobs/{id}). */
export interface Job<P = any> {
  id: string;
  moved_from?: string;
  queue: string;
  payload: P;
  state: JobState;
  priority: Priority;
  attempt: number;
  max_retries: number;
  attempts_remaining: number;
  retry_backoff: string;
  retry_base_delay: string;
  retry_max_delay: string;
  lease_duration: number;
  created_at: string;
  scheduled_at: string | null;
  started_at: string | null;
  completed_at: string | null;
  failed_at: string | null;
  lease_expires_at: string | null;
  expire_after: string | null;
  expire_at: string | null;
  unique_key: string | null;
  unique_period: number | null;
  batch_id: string | null;
  chain_id: string | null;
  chain_step: number | null;
  chain_config: unknown;
  /** The jobs this one waits for (enqueued with depends_on; else empty). */
  depends_on: string[];
  /** How many of depends_on have completed. */
  dependencies_done: number;
  tags: Record<string, string>;
  progress: any;
  checkpoint: any;
  result: any;
  cancel_requested: boolean;
  reason: string | null;
  last_error: string | null;
  errors: JobErrorEntry[];
  worker: { id: string; hostname: string | null } | null;
  timeline?: TimelineEntry[];
  /** Null for a job enqueued without routing. */
  routing?: JobRouting | null;
  /** Null until a worker reports usage. */
  usage?: JobUsage | null;
}

/** A job document's routing: as enqueued, its try order, the current model and how many provider errors moved it on. */
export interface JobRouting extends Routing {
  order: string[];
  target: string;
  index: number;
  fallbacks: number;
}

/** Tokens and cost added up. */
export interface UsageCounts {
  input_tokens: number;
  output_tokens: number;
  cache_creation_tokens: number;
  cache_read_tokens: number;
  cost_usd: number;
}

/** A job document's usage: its totals and every report, oldest first. */
export interface JobUsage extends UsageCounts {
  reports: UsageReport[];
}

/** One usage record of a job: an attempt's heartbeats (the latest cumulative report), its ack or its fail. */
export interface UsageReport extends UsageCounts {
  attempt: number;
  phase: "heartbeat" | "ack" | "fail";
  model: string | null;
  provider: string | null;
  latency_ms: number;
  at: string;
}

/** A budget as GET /api/v1/budgets lists it, with the spend of the current UTC day. */
export interface Budget {
  /** queue:<name>, tag:<key>=<value> or global. */
  scope: string;
  daily_usd: number | null;
  per_job_usd: number | null;
  on_exceed: "hold" | "reject" | "alert_only";
  day: string;
  spent_usd: number;
  exceeded: boolean;
}

/** PUT /api/v1/budgets: daily_usd, per_job_usd or both. */
export interface BudgetRequest {
  scope: string;
  daily_usd?: number;
  per_job_usd?: number;
  /** Default hold. */
  on_exceed?: "hold" | "reject" | "alert_only";
}

/** The answer to a move. */
export interface Moved {
  job_id: string;
  moved_from?: string;
  queue: string;
  status: string;
  in_transit?: boolean;
}

/** A page of the dead-letter list. */
export interface DeadPage {
  jobs: Job[];
  has_more: boolean;
  cursor: string | null;
}

/** POST /api/v1/jobs/search, and a bulk operation's filter. */
export interface SearchRequest {
  queue?: string;
  state?: JobState[];
  priority?: Priority;
  tags?: Record<string, string>;
  payload_contains?: string;
  payload_jq?: string;
  created_after?: string;
  created_before?: string;
  scheduled_after?: string;
  scheduled_before?: string;
  started_after?: string;
  started_before?: string;
  completed_after?: string;
  completed_before?: string;
  expire_after?: string;
  expire_before?: string;
  worker_id?: string;
  has_errors?: boolean;
  error_contains?: string;
  batch_id?: string;
  /** Jobs enqueued with this job ID in their depends_on (its children). */
  depends_on?: string;
  /** Jobs with a usage report of this model. */
  model?: string;
  /** Jobs whose usage reports add up to at least this cost (USD). */
  min_cost_usd?: number;
  unique_key?: string;
  attempt_min?: number;
  attempt_max?: number;
  job_id_prefix?: string;
  sort?: "created_at" | "scheduled_at" | "started_at" | "completed_at" | "priority" | "attempt";
  order?: "asc" | "desc";
  cursor?: string | null;
  limit?: number;
}

/** A job as search finds it. */
export interface SearchHit<P = any> {
  id: string;
  queue: string;
  state: JobState;
  priority: Priority;
  payload: P;
  attempt: number;
  max_retries: number;
  created_at: string;
  scheduled_at: string | null;
  started_at: string | null;
  completed_at: string | null;
  last_error: string | null;
  error_count: number;
  reason: string | null;
  tags: Record<string, string>;
  batch_id: string | null;
  unique_key: string | null;
  worker_id: string | null;
  progress: any;
}

/** One page of a search. */
export interface SearchPage {
  jobs: SearchHit[];
  total: number;
  cursor: string | null;
  has_more: boolean;
  duration_ms: number;
  stale?: boolean;
}

/** POST /api/v1/jobs/bulk. */
export interface BulkRequest {
  job_ids?: string[];
  filter?: SearchRequest;
  action: "retry" | "requeue" | "delete" | "cancel" | "move" | "change_priority";
  move_to_queue?: string;
  priority?: Priority;
  /** Run in the background whatever the size. */
  async?: boolean;
  /** Needed when the filter selects every job of a queue or of the cluster. */
  confirm?: boolean;
}

/** The answer of a bulk operation run at once. */
export interface BulkResult {
  affected: number;
  errors: number;
  failed: JobFailure[];
  duration_ms: number;
}

/** The answer of a bulk operation accepted to run in the background. */
export interface BulkAccepted {
  bulk_operation_id: string;
  status: string;
  estimated_total: number;
  progress_url: string;
}

/** A background bulk operation's record. */
export interface BulkOperation {
  id: string;
  action: string;
  status: "processing" | "completed" | "cancelled" | "failed" | "interrupted";
  namespace: string;
  total: number;
  processed: number;
  affected: number;
  errors: number;
  created_at: string;
  finished_at?: string;
  duration_ms: number;
  error?: string;
  failed?: JobFailure[];
}

/** A queue's rate limit. */
export interface Throttle {
  rate: number;
  period?: string;
  window_ms?: number;
}

/** A queue's counts and settings. */
export interface Queue {
  name: string;
  pending: number;
  active: number;
  scheduled: number;
  retrying: number;
  completed: number;
  dead: number;
  cancelled: number;
  paused: boolean;
  max_concurrency: number | null;
  throttle: Throttle | null;
  totals: { enqueued: number; completed: number; failed: number; dead: number };
  throughput: { enqueued_per_s: number; completed_per_s: number; failed_per_s: number } | null;
}

/** A cron schedule. */
export interface Schedule {
  id?: string;
  name: string;
  queue: string;
  cron: string;
  timezone?: string;
  payload?: unknown;
  unique_key?: string;
  max_retries?: number;
  priority?: Priority;
  next_run?: string | null;
  last_run?: string | null;
  /** The job of the last run (answered, not sent). */
  last_job_id?: string | null;
  /** A paused schedule fires nothing until resumed (answered, not sent). */
  paused?: boolean;
  created_at?: string;
}

/** A worker the server has heard from. */
export interface WorkerInfo {
  id: string;
  hostname: string | null;
  queues: string[];
  active_jobs: number;
  jobs: string[];
  first_seen: string;
  last_seen: string;
}

/** A batch's counts (GET /api/v1/batches/{id}). */
export interface BatchStatus {
  id: string;
  total: number;
  pending: number;
  succeeded: number;
  failed: number;
  callback_queue: string | null;
  callback_payload: unknown;
  callback_job_id: string | null;
  created_at: string;
  completed_at: string | null;
}

/** One job lifecycle transition of the event stream. */
export interface JobEvent {
  type: string;
  job_id: string;
  queue: string;
  state: JobState;
  attempt: number;
  at: string;
  worker_id?: string;
  error?: string;
  reason?: string;
  progress?: unknown;
  next_attempt_at?: string;
  scheduled_at?: string;
  from_queue?: string;
  moved_to?: string;
}

/** A frame of the event stream: a job event, or a reset (refetch state). */
export type StreamEvent =
  | { id: string; type: "job"; job: JobEvent }
  | { id: string; type: "reset"; reason: string };

/** GET /healthz. */
export interface Health {
  status: string;
  shards: number;
  shards_led: number;
  /** By data shard, the node this node's replica hears as its leader (0: none known, or not hosted here); the nodes read it from each other. */
  leaders?: number[];
  /** By data shard, this node's replica's applied Raft index (0: not hosted here). */
  applied?: number[];
  auth?: "keys" | "open" | "off";
}

/** GET /api/v1/cluster/status. */
export interface ClusterStatus {
  node_id: number;
  shard_count: number;
  replicas: number;
  nodes: {
    node_id: number;
    name: string;
    http_address: string;
    raft_address: string;
    status: "up" | "down";
    leader_of: number[];
    mirror_lag_entries: number | null;
  }[];
  shards: ShardStatus[];
  meta: ShardStatus | null;
  mirror: { lag_entries: number | null };
}

/** One shard's leader and replicas. */
export interface ShardStatus {
  shard_id: number;
  leader_node: number;
  term: number;
  replicas: { node_id: number; role: "leader" | "follower" | "learner"; applied_index?: number; lag?: number }[];
  placed_nodes: number[];
  settled?: boolean;
  proposal_latency_ms?: { p50: number; p90: number; p99: number; samples: number };
}

/** An API key's record (never the key itself). */
export interface APIKey {
  id: string;
  name: string;
  namespace: string;
  role: string;
  queues: string[];
  enabled: boolean;
  created_at: string;
  created_by: string;
  expires_at: string | null;
  last_used_at: string | null;
  rate_read: number;
  rate_write: number;
}

/** POST /api/v1/auth/keys. */
export interface CreateKeyRequest {
  name: string;
  namespace?: string;
  role?: string;
  queues?: string[];
  expires_at?: string;
  rate_read?: number;
  rate_write?: number;
}

/** PATCH /api/v1/auth/keys/{id}: the fields given change. */
export interface UpdateKeyRequest {
  name?: string;
  role?: string;
  queues?: string[];
  enabled?: boolean;
  expires_at?: string;
  rate_read?: number;
  rate_write?: number;
}

/** GET /api/v1/auth/whoami. */
export interface WhoAmI {
  auth: "keys" | "open" | "off";
  key_id: string;
  name: string;
  namespace: string;
  role: string;
  queues: string[];
  role_queues: string[];
  permissions: string[];
  sso: boolean;
  grants: Record<string, string>;
}

/** A role (built-in or custom). */
export interface Role {
  name: string;
  built_in: boolean;
  permissions: string[];
  queues: string[];
  created_at: string | null;
  updated_at: string | null;
}

/** A namespace. */
export interface Namespace {
  name: string;
  description: string;
  keys: number;
  created_at: string | null;
}

/** One audited call. */
export interface AuditRecord {
  id: string;
  at: string;
  key_id: string;
  key_name: string;
  role: string;
  namespace: string;
  method: string;
  path: string;
  status: number;
  summary: string;
  remote: string;
}

/** GET /api/v1/audit's filter. */
export interface AuditFilter {
  namespace?: string;
  key_id?: string;
  method?: string;
  path_prefix?: string;
  status?: number;
  since?: string;
  until?: string;
  limit?: number;
  cursor?: string;
}

/** A page of the audit log, newest first. */
export interface AuditPage {
  records: AuditRecord[];
  has_more: boolean;
  cursor: string | null;
}

/** The answer to a restore. */
export interface RestoreResult {
  restored: Record<string, number>;
  exists: Record<string, number>;
  /** Records left out because they had expired by the restore (cache entries); absent when none. */
  expired?: Record<string, number>;
  failed: number;
  remapped: number;
  shards: number;
  errors?: string[];
}
