// Typed client of Corvo's HTTP API (docs/api.md). Every call goes to the
// same origin that served the UI.

export type JobState =
  | 'scheduled' | 'pending' | 'active' | 'retrying'
  | 'completed' | 'dead' | 'cancelled' | 'held'

export const JOB_STATES: JobState[] = ['pending', 'active', 'scheduled', 'retrying', 'held', 'completed', 'dead', 'cancelled']
export const PRIORITIES = ['critical', 'high', 'normal'] as const
export type Priority = (typeof PRIORITIES)[number]

export interface Throttle { rate: number; period: string; window_ms: number }
export interface Queue {
  name: string
  pending: number; active: number; scheduled: number; retrying: number
  completed: number; dead: number; cancelled: number; held?: number
  paused: boolean
  max_concurrency: number | null
  throttle: Throttle | null
  totals?: { enqueued: number; completed: number; failed: number; dead: number }
  throughput: { enqueued_per_s: number; completed_per_s: number; failed_per_s: number } | null
  // Wait (runnable → started) and run (started → finished) times over the
  // last window_s seconds; null when nothing started or finished then.
  latency?: QueueLatency | null
}

export interface Quantiles { p50: number; p95: number; p99: number; samples: number }
export interface QueueLatency { wait_ms: Quantiles | null; run_ms: Quantiles | null; window_s: number }

export interface HistorySeries {
  enqueued_per_s: (number | null)[]; completed_per_s: (number | null)[]; failed_per_s: (number | null)[]
  pending: (number | null)[]; active: (number | null)[]; waiting: (number | null)[]; oldest_pending_s: (number | null)[]
}
export interface QueueHistory {
  step_s: number
  t: number[]
  total: HistorySeries
  queues: (HistorySeries & { name: string; latency: QueueLatency | null })[]
}

export interface Progress { current?: number; total?: number; message?: string }
export interface JobError { attempt: number; error: string; backtrace?: string; at: string }
export interface TimelineEntry { at: string; type: string; attempt?: number; worker_id?: string; detail?: string }

// Usage and cost (docs/api.md "Usage and cost"): what a job's LLM calls
// used, reported by its worker on heartbeats, acks and fails.
export interface UsageCounts {
  input_tokens: number; output_tokens: number; cache_creation_tokens: number; cache_read_tokens: number; cost_usd: number
}
export type UsagePhase = 'heartbeat' | 'ack' | 'fail'
export interface UsageReport extends UsageCounts {
  attempt: number; phase: UsagePhase; model: string | null; provider: string | null; latency_ms: number; at: string
}
export interface JobUsage extends UsageCounts { reports: UsageReport[] }

export const USAGE_PERIODS = ['24h', '7d', '30d'] as const
export type UsagePeriod = (typeof USAGE_PERIODS)[number]
export interface UsageGroup extends UsageCounts { key: string | null; jobs: number; reports: number; cost_per_job_usd: number }
export interface UsageSummary {
  period: UsagePeriod; group_by: string | null
  groups: UsageGroup[]
  totals: Omit<UsageGroup, 'key'>
  cache: { hits: number; misses: number; hit_rate: number; estimated_savings_usd: number }
}

// Budgets (docs/api.md "Budgets"): a limit on what a scope's LLM work
// may cost, with the spend of the current UTC day summed over the shards.
export type BudgetAction = 'hold' | 'reject' | 'alert_only'
export interface Budget {
  scope: string // queue:<name>, tag:<key>=<value> or global
  daily_usd: number | null; per_job_usd: number | null
  on_exceed: BudgetAction
  day: string; spent_usd: number; exceeded: boolean
}

// Providers (docs/api.md "Providers"): a model provider's limits per
// minute (null: none), shared by the queues linked to it, with what the
// last minute used summed over the shards, and each member shard's share.
export interface ProviderWindow { requests: number; input_tokens: number; output_tokens: number }
export interface Provider {
  name: string
  rpm_limit: number | null; input_tpm_limit: number | null; output_tpm_limit: number | null
  queues: string[]
  window: ProviderWindow
  shares: { shard: number; rpm: number | null; input_tpm: number | null; output_tpm: number | null; window: ProviderWindow }[]
}

// A job's quality scores (POST /api/v1/jobs/{id}/score), oldest first.
export interface JobScore { scorer: string; dimensions: Record<string, number>; comment: string | null; at: string }

// A job's model routing: the try order and the model to call now.
export interface JobRouting {
  prefer: string; fallback?: string[]; strategy: string; prices?: Record<string, number>
  order: string[]; target: string; index: number; fallbacks: number
}

export interface Job {
  id: string; queue: string; payload: unknown; state: JobState; priority: Priority
  attempt: number; max_retries: number; attempts_remaining: number
  retry_backoff: string; retry_base_delay: string; retry_max_delay: string
  lease_duration: number
  created_at: string; scheduled_at: string | null; started_at: string | null
  completed_at: string | null; failed_at: string | null; lease_expires_at: string | null
  expire_after: string | null; expire_at: string | null
  unique_key: string | null; unique_period: number | null
  batch_id: string | null; chain_id: string | null; chain_step: number | null; chain_config: unknown
  // The jobs a held job waits for, and how many of them completed (older
  // servers send neither).
  depends_on?: string[] | null; dependencies_done?: number
  tags: Record<string, string>
  progress: Progress | number | null; checkpoint: unknown; result: unknown
  cancel_requested: boolean; reason: string | null; last_error: string | null
  errors: JobError[]
  worker: { id: string; hostname: string } | null
  timeline?: TimelineEntry[]
  // Usage (null until a worker reports some) and the result cache: the
  // job whose cached result completed this one.
  usage?: JobUsage | null
  cache_key?: string | null; cached_from?: string | null
  // Older servers send neither.
  scores?: JobScore[]
  routing?: JobRouting | null
}

export interface JobRow {
  id: string; queue: string; state: JobState; priority: Priority; payload: unknown
  attempt: number; max_retries: number
  created_at: string; scheduled_at: string | null; started_at: string | null; completed_at: string | null
  last_error: string | null; error_count: number; reason: string | null
  tags: Record<string, string>; batch_id: string | null; unique_key: string | null
  worker_id: string | null; progress: Progress | number | null
  // A payload over 8 KiB is left out of a search page: null here, with
  // payload_omitted and its size.
  payload_omitted?: boolean; payload_bytes?: number
}

export interface SearchFilter {
  queue?: string
  state?: JobState[]
  priority?: Priority
  tags?: Record<string, string>
  payload_contains?: string
  payload_jq?: string
  error_contains?: string
  created_after?: string
  created_before?: string
  worker_id?: string
  job_id_prefix?: string
  batch_id?: string
  depends_on?: string // jobs enqueued with this job ID in their depends_on (its children)
  has_errors?: boolean
  model?: string        // jobs with a usage report of this model
  min_cost_usd?: number // jobs whose usage cost at least this much
  sort?: string
  order?: 'asc' | 'desc'
  cursor?: string | null
  limit?: number
}
// partial: the search hit its deadline; total is then a lower bound and
// the cursor continues after the last job shown.
export interface SearchPage { jobs: JobRow[]; total: number; cursor: string | null; has_more: boolean; duration_ms: number; partial?: boolean; stale?: boolean }

export type BulkAction = 'retry' | 'requeue' | 'delete' | 'cancel' | 'move' | 'change_priority'
export interface BulkRequest {
  job_ids?: string[]
  filter?: SearchFilter
  action: BulkAction
  move_to_queue?: string
  priority?: Priority
  async?: boolean
  confirm?: boolean // needed when filter selects a whole queue (or every job)
}
export interface BulkResult { affected: number; errors: number; failed?: { job_id: string; code: string; error: string }[]; duration_ms: number }
export interface BulkAccepted { bulk_operation_id: string; status: string; estimated_total: number; progress_url: string }
export interface BulkOperation {
  id: string; action: string
  status: 'processing' | 'completed' | 'cancelled' | 'failed' | 'interrupted'
  total: number; processed: number; affected: number; errors: number
  created_at: string; finished_at: string | null; duration_ms: number
}

export interface Worker { id: string; hostname: string; queues: string[]; active_jobs: number; jobs: string[]; first_seen: string; last_seen: string }
export interface Schedule {
  id: string; name: string; queue: string; cron: string; timezone: string; payload: unknown
  unique_key: string | null; max_retries: number | null; priority: string | null
  next_run: string | null; last_run: string | null; created_at: string
  paused?: boolean; last_job_id?: string | null
}
export interface ClusterShard {
  shard_id: number; leader_node: string | number; term?: number
  replicas: { node_id: string | number; role: 'leader' | 'follower' | 'learner'; applied_index?: number; lag?: number }[]
  proposal_latency_ms?: { p50: number; p90: number; p99: number; samples?: number }
}
export interface ClusterStatus {
  node_id: string | number
  shard_count?: number
  replicas?: number
  nodes: { node_id: string | number; name?: string; http_address: string; raft_address: string; status: 'up' | 'down'; leader_of: number[]; mirror_lag_entries?: number }[]
  shards: ClusterShard[]
  meta?: ClusterShard
  mirror?: { lag_entries: number }
}
export interface Batch {
  id: string; total: number; pending: number; succeeded: number; failed: number
  callback_queue: string; callback_payload?: unknown; callback_job_id: string | null
  created_at: string; completed_at: string | null
}
export interface Health { status: string; shards: number; shards_led: number }

// The audit log (docs/api.md, "Audit log"): one record per audited call.
export interface AuditRecord {
  id: string; at: string
  key_id: string; key_name: string; role: string; namespace: string
  method: string; path: string; status: number
  summary: string; remote: string
}
export interface AuditPage { records: AuditRecord[]; has_more: boolean; cursor: string | null }

export class ApiError extends Error {
  constructor(public status: number, public code: string, message: string) { super(message) }
}

export interface WhoAmI {
  auth: 'keys' | 'open' | 'off'
  key_id: string; name: string; namespace: string; role: string
  queues: string[]; permissions: string[]
  // A single sign-on session: the namespaces it may act in, with its role
  // in each.
  sso?: boolean; grants?: Record<string, string>
}

// How the login may sign in (GET /api/v1/auth/methods, open).
export interface AuthMethods { api_key: boolean; sso: { enabled: boolean; login_url?: string } }

const noSSO: AuthMethods = { api_key: true, sso: { enabled: false } }

// authMethods asks the server whether it offers single sign-on; an older
// server, or one that cannot answer, is taken to offer keys only.
export async function authMethods(): Promise<AuthMethods> {
  try {
    const r = await fetch('/api/v1/auth/methods')
    return r.ok ? (await r.json()) as AuthMethods : noSSO
  } catch {
    return noSSO
  }
}

// The namespace the UI acts in (a single sign-on user with grants in
// several): the server reads the corvo_namespace cookie on every call,
// the event stream's included.
export const NAMESPACE_COOKIE = 'corvo_namespace'

export function setNamespace(ns: string) {
  document.cookie = `${NAMESPACE_COOKIE}=${encodeURIComponent(ns)}; path=/; SameSite=Strict`
}

// clearNamespace drops the choice: calls act in the session's own
// namespace again.
export function clearNamespace() {
  document.cookie = `${NAMESPACE_COOKIE}=; path=/; max-age=0; SameSite=Strict`
}

// chosenNamespace is the namespace the cookie names, or "".
export function chosenNamespace(): string {
  for (const c of document.cookie.split(';')) {
    const [k, ...v] = c.trim().split('=')
    if (k === NAMESPACE_COOKIE) return decodeURIComponent(v.join('='))
  }
  return ''
}

// A namespace as GET /api/v1/namespaces lists it (admins).
export interface Namespace { name: string; description: string; keys: number; created_at: string | null }

// A 401 from any call (but the login itself, whose form shows its own
// error) means the session is gone or never was: the app shows its login.
let onUnauthorized: (message: string) => void = () => {}
export function setUnauthorizedHandler(fn: (message: string) => void) { onUnauthorized = fn }

const SESSION = '/api/v1/auth/session'

async function call<T>(method: string, path: string, body?: unknown, signal?: AbortSignal, headers: Record<string, string> = {}): Promise<T> {
  // The server refuses a POST or PUT not declared JSON (415), even one
  // without a body: every call but a GET says so.
  const init: RequestInit = { method, signal, headers: method === 'GET' ? headers : { ...headers, 'Content-Type': 'application/json' } }
  if (body !== undefined) init.body = JSON.stringify(body)
  const res = await fetch(path, init)
  const text = await res.text()
  let data: unknown = null
  if (text) {
    try { data = JSON.parse(text) } catch { data = null }
  }
  if (!res.ok) {
    const e = (data ?? {}) as { error?: string; code?: string }
    if (res.status === 401 && path !== SESSION) onUnauthorized(e.error ?? 'this server needs an API key')
    throw new ApiError(res.status, e.code ?? 'http_' + res.status, e.error ?? `${method} ${path}: HTTP ${res.status}`)
  }
  return data as T
}

const enc = encodeURIComponent
const A = '/api/v1'

export const api = {
  health: (s?: AbortSignal) => call<Health>('GET', '/healthz', undefined, s),
  queues: (s?: AbortSignal) => call<{ queues: Queue[] }>('GET', `${A}/queues`, undefined, s).then((r) => r.queues),
  queueHistory: (since: string, s?: AbortSignal) => call<QueueHistory>('GET', `${A}/queues/history?since=${enc(since)}`, undefined, s),
  pause: (q: string) => call('POST', `${A}/queues/${enc(q)}/pause`),
  resume: (q: string) => call('POST', `${A}/queues/${enc(q)}/resume`),
  clear: (q: string) => call<{ cleared: number }>('POST', `${A}/queues/${enc(q)}/clear`),
  drain: (q: string) => call<{ active: number }>('POST', `${A}/queues/${enc(q)}/drain`),
  deleteQueue: (q: string) => call<{ jobs_deleted: number }>('DELETE', `${A}/queues/${enc(q)}?confirm=true`),
  concurrency: (q: string, max: number | null) => call('POST', `${A}/queues/${enc(q)}/concurrency`, { max }),
  throttle: (q: string, rate: number, period: string) => call('POST', `${A}/queues/${enc(q)}/throttle`, { rate, period }),
  unthrottle: (q: string) => call('DELETE', `${A}/queues/${enc(q)}/throttle`),

  job: (id: string, s?: AbortSignal) => call<Job>('GET', `${A}/jobs/${enc(id)}`, undefined, s),
  retry: (id: string) => call('POST', `${A}/jobs/${enc(id)}/retry`),
  cancel: (id: string) => call<{ status: string }>('POST', `${A}/jobs/${enc(id)}/cancel`),
  approve: (id: string) => call('POST', `${A}/jobs/${enc(id)}/approve`),
  reject: (id: string) => call('POST', `${A}/jobs/${enc(id)}/reject`),
  // move: without priority the job keeps its own.
  move: (id: string, queue: string, reset_attempt: boolean, priority?: Priority) =>
    call<{ job_id: string; queue: string; moved_from?: string }>('POST', `${A}/jobs/${enc(id)}/move`, priority ? { queue, reset_attempt, priority } : { queue, reset_attempt }),
  deleteJob: (id: string) => call('DELETE', `${A}/jobs/${enc(id)}`),
  enqueue: (body: Record<string, unknown>) => call<{ job_id: string; status: string }>('POST', `${A}/enqueue`, body),

  search: (f: SearchFilter, s?: AbortSignal) => call<SearchPage>('POST', `${A}/jobs/search`, f, s),
  bulk: (r: BulkRequest) => call<BulkResult | BulkAccepted>('POST', `${A}/jobs/bulk`, r),
  bulkStatus: (id: string, s?: AbortSignal) => call<BulkOperation>('GET', `${A}/bulk/${enc(id)}`, undefined, s),
  bulkCancel: (id: string) => call('DELETE', `${A}/bulk/${enc(id)}`),
  bulkList: (s?: AbortSignal) =>
    call<{ operations?: BulkOperation[]; bulk_operations?: BulkOperation[] } | BulkOperation[]>('GET', `${A}/bulk`, undefined, s).then((r) =>
      Array.isArray(r) ? r : (r.operations ?? r.bulk_operations ?? [])),

  workers: (s?: AbortSignal) => call<{ workers: Worker[] }>('GET', `${A}/workers`, undefined, s).then((r) => r.workers),
  schedules: (s?: AbortSignal) => call<{ schedules: Schedule[] }>('GET', `${A}/schedules`, undefined, s).then((r) => r.schedules),
  createSchedule: (body: Record<string, unknown>) => call<Schedule>('POST', `${A}/schedules`, body),
  updateSchedule: (id: string, body: Record<string, unknown>) => call<Schedule>('PUT', `${A}/schedules/${enc(id)}`, body),
  deleteSchedule: (id: string) => call('DELETE', `${A}/schedules/${enc(id)}`),
  runSchedule: (id: string) => call<{ job_id: string; status: string }>('POST', `${A}/schedules/${enc(id)}/run`),
  pauseSchedule: (id: string) => call<Schedule>('POST', `${A}/schedules/${enc(id)}/pause`),
  resumeSchedule: (id: string) => call<Schedule>('POST', `${A}/schedules/${enc(id)}/resume`),
  // group_by: queue, model, provider, tag:<key>, hour or day (buckets of
  // time, oldest first); none: totals only.
  usageSummary: (period: UsagePeriod, groupBy?: string, s?: AbortSignal) =>
    call<UsageSummary>('GET', `${A}/usage/summary?period=${enc(period)}${groupBy ? `&group_by=${enc(groupBy)}` : ''}`, undefined, s),
  budgets: (s?: AbortSignal) => call<{ budgets: Budget[] }>('GET', `${A}/budgets`, undefined, s).then((r) => r.budgets ?? []),
  providers: (s?: AbortSignal) => call<{ providers: Provider[] }>('GET', `${A}/providers`, undefined, s).then((r) => r.providers ?? []),
  batch: (id: string, s?: AbortSignal) => call<Batch>('GET', `${A}/batches/${enc(id)}`, undefined, s),
  rebuildMirror: () => call<{ status: string }>('POST', `${A}/admin/rebuild-mirror`),
  cluster: (s?: AbortSignal) => call<ClusterStatus>('GET', `${A}/cluster/status`, undefined, s),
  audit: (params: URLSearchParams, s?: AbortSignal) => {
    const q = params.toString()
    return call<AuditPage>('GET', `${A}/audit${q ? '?' + q : ''}`, undefined, s)
  },

  // Namespaces (admins: namespaces:manage). `as` names the namespace the
  // call acts in (the X-Corvo-Namespace header, which wins over the
  // cookie): a single sign-on user who is admin in another namespace than
  // the one it acts in lists them from there.
  namespaces: (s?: AbortSignal, as?: string) =>
    call<{ namespaces: Namespace[] }>('GET', `${A}/namespaces`, undefined, s, as ? { 'X-Corvo-Namespace': as } : {}).then((r) => r.namespaces),
  createNamespace: (name: string, description: string) => call<Namespace>('POST', `${A}/namespaces`, { name, description }),
  deleteNamespace: (name: string) => call<{ name: string; deleted: boolean }>('DELETE', `${A}/namespaces/${enc(name)}`),

  // The session: the server keeps the key in an HttpOnly cookie (the
  // page never stores it).
  whoami: (s?: AbortSignal) => call<WhoAmI>('GET', `${A}/auth/whoami`, undefined, s),
  login: (key: string) => call<WhoAmI>('POST', SESSION, { key }),
  logout: () => call<{ logged_out: boolean }>('DELETE', SESSION),
}

export function isAccepted(r: BulkResult | BulkAccepted): r is BulkAccepted {
  return (r as BulkAccepted).bulk_operation_id !== undefined
}
