// A job search lives in the URL's query string so it can be shared:
// /ui/queues/emails.send?state=dead&error=SMTP&jq=.to%20|%20endswith(%22x%22)
import { JOB_STATES, PRIORITIES, type JobState, type Priority, type SearchFilter } from './api'

export interface SearchForm {
  queue: string
  states: JobState[]
  priority: Priority | ''
  tags: string // "k=v, k2=v2"
  payload: string
  jq: string
  error: string
  after: string // datetime-local value, or an RFC 3339 time
  before: string
  worker: string
  id: string
  batch: string  // batch_id: a batch's members
  parent: string // depends_on: the jobs waiting on this job
  model: string  // jobs with a usage report of this model
  minCost: string // min_cost_usd, as typed ("0.05")
  sort: string
  order: 'asc' | 'desc'
}

export const SORTS = ['created_at', 'scheduled_at', 'started_at', 'completed_at', 'priority', 'attempt'] as const

export function emptyForm(): SearchForm {
  return { queue: '', states: [], priority: '', tags: '', payload: '', jq: '', error: '', after: '', before: '', worker: '', id: '', batch: '', parent: '', model: '', minCost: '', sort: 'created_at', order: 'desc' }
}

export function formFromQuery(q: URLSearchParams): SearchForm {
  const f = emptyForm()
  f.queue = q.get('queue') ?? ''
  f.states = (q.get('state') ?? '').split(',').filter((s): s is JobState => (JOB_STATES as string[]).includes(s))
  const p = q.get('priority') ?? ''
  f.priority = (PRIORITIES as readonly string[]).includes(p) ? (p as Priority) : ''
  f.tags = q.getAll('tag').join(', ')
  f.payload = q.get('payload') ?? ''
  f.jq = q.get('jq') ?? ''
  f.error = q.get('error') ?? ''
  f.after = q.get('after') ?? ''
  f.before = q.get('before') ?? ''
  f.worker = q.get('worker') ?? ''
  f.id = q.get('id') ?? ''
  f.batch = q.get('batch') ?? ''
  f.parent = q.get('depends_on') ?? ''
  f.model = q.get('model') ?? ''
  f.minCost = q.get('min_cost') ?? ''
  const s = q.get('sort') ?? ''
  f.sort = (SORTS as readonly string[]).includes(s) ? s : 'created_at'
  f.order = q.get('order') === 'asc' ? 'asc' : 'desc'
  return f
}

// queryFromForm is the inverse of formFromQuery; defaults are left out so
// URLs stay short.
export function queryFromForm(f: SearchForm, includeQueue = true): URLSearchParams {
  const q = new URLSearchParams()
  if (includeQueue && f.queue) q.set('queue', f.queue)
  if (f.states.length) q.set('state', f.states.join(','))
  if (f.priority) q.set('priority', f.priority)
  for (const [k, v] of parseTags(f.tags)) q.append('tag', `${k}=${v}`)
  if (f.payload) q.set('payload', f.payload)
  if (f.jq) q.set('jq', f.jq)
  if (f.error) q.set('error', f.error)
  if (f.after) q.set('after', f.after)
  if (f.before) q.set('before', f.before)
  if (f.worker) q.set('worker', f.worker)
  if (f.id) q.set('id', f.id)
  if (f.batch) q.set('batch', f.batch)
  if (f.parent) q.set('depends_on', f.parent)
  if (f.model) q.set('model', f.model)
  if (f.minCost) q.set('min_cost', f.minCost)
  if (f.sort !== 'created_at') q.set('sort', f.sort)
  if (f.order !== 'desc') q.set('order', f.order)
  return q
}

// parseTags reads "tenant=acme, region = eu" into pairs; entries without
// "=" or with an empty key are skipped.
export function parseTags(s: string): [string, string][] {
  const out: [string, string][] = []
  for (const part of s.split(',')) {
    const i = part.indexOf('=')
    if (i <= 0) continue
    const k = part.slice(0, i).trim()
    if (k) out.push([k, part.slice(i + 1).trim()])
  }
  return out
}

// toRFC3339 accepts what a datetime-local input gives ("2026-02-10T09:30",
// local time), a date ("2026-02-10", local midnight) or a full RFC 3339 time.
export function toRFC3339(v: string): string | undefined {
  if (!v) return undefined
  const d = new Date(/^\d{4}-\d\d-\d\d$/.test(v) ? v + 'T00:00' : v)
  if (Number.isNaN(d.getTime())) return undefined
  return d.toISOString()
}

export function filterFromForm(f: SearchForm): SearchFilter {
  const out: SearchFilter = { sort: f.sort, order: f.order }
  if (f.queue) out.queue = f.queue
  if (f.states.length) out.state = f.states
  if (f.priority) out.priority = f.priority
  const tags = parseTags(f.tags)
  if (tags.length) out.tags = Object.fromEntries(tags)
  if (f.payload) out.payload_contains = f.payload
  if (f.jq) out.payload_jq = f.jq
  if (f.error) out.error_contains = f.error
  const a = toRFC3339(f.after)
  if (a) out.created_after = a
  const b = toRFC3339(f.before)
  if (b) out.created_before = b
  if (f.worker) out.worker_id = f.worker
  if (f.id) out.job_id_prefix = f.id
  if (f.batch) out.batch_id = f.batch
  if (f.parent) out.depends_on = f.parent
  if (f.model) out.model = f.model
  const c = parseCost(f.minCost)
  if (c !== undefined) out.min_cost_usd = c
  return out
}

// parseCost reads a cost bound as typed ("0.05", "$1.20", " 3 "): a
// non-negative number of dollars, or undefined (empty or not a number:
// no bound).
export function parseCost(v: string): number | undefined {
  const t = v.trim().replace(/^\$/, '')
  if (!t || !/^\d*\.?\d+$|^\d+\.$/.test(t)) return undefined
  const n = Number(t)
  return Number.isFinite(n) && n >= 0 ? n : undefined
}

// describe says in words what a filter matches, for confirmations.
export function describe(f: SearchForm): string {
  const parts: string[] = []
  if (f.queue) parts.push(`queue ${f.queue}`)
  if (f.states.length) parts.push(`state ${f.states.join(' or ')}`)
  if (f.priority) parts.push(`priority ${f.priority}`)
  for (const [k, v] of parseTags(f.tags)) parts.push(`tag ${k}=${v}`)
  if (f.payload) parts.push(`payload contains "${f.payload}"`)
  if (f.jq) parts.push(`payload matches ${f.jq}`)
  if (f.error) parts.push(`error contains "${f.error}"`)
  if (f.after) parts.push(`created after ${f.after}`)
  if (f.before) parts.push(`created before ${f.before}`)
  if (f.worker) parts.push(`worker ${f.worker}`)
  if (f.id) parts.push(`id starts with ${f.id}`)
  if (f.batch) parts.push(`batch ${f.batch}`)
  if (f.parent) parts.push(`waiting on ${f.parent}`)
  if (f.model) parts.push(`model ${f.model}`)
  const c = parseCost(f.minCost)
  if (c !== undefined) parts.push(`cost at least $${c}`)
  return parts.length ? parts.join(', ') : 'every job'
}

// activeFilters counts what a search form sets beyond the page's own
// (its fixed queue or states) and the default sort: 0 means "every job",
// where a collapsible form starts collapsed.
export function activeFilters(f: SearchForm, fixed: { queue?: boolean; states?: boolean; batch?: boolean; sort?: string } = {}): number {
  let n = 0
  if (!fixed.queue && f.queue) n++
  if (!fixed.states && f.states.length) n++
  if (!fixed.batch && f.batch) n++
  for (const v of [f.priority, f.tags, f.payload, f.jq, f.error, f.after, f.before, f.worker, f.id, f.parent, f.model, f.minCost]) if (v) n++
  if (f.sort !== (fixed.sort ?? 'created_at') || f.order !== 'desc') n++
  return n
}

// reasonText says in words why a job is dead or cancelled.
export function reasonText(reason: string | null): string {
  switch (reason) {
    case null: case '': return ''
    case 'max_retries': return 'out of attempts'
    case 'lease_expired': return 'lease expired'
    default: return reason
  }
}
