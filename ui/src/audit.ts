// The audit page's filters live in the URL's query string, like the job
// search (/ui/audit?method=DELETE&status=403); this turns them into the
// API's parameters and merges the pages that "Load more" fetches.
import type { AuditPage, AuditRecord } from './api'
import { toRFC3339 } from './search'

// The permission the audit page needs (the sidebar offers it only then).
export const AUDIT_PERMISSION = 'audit:read'

export interface AuditForm {
  namespace: string // admins only: other keys read their own namespace
  key_id: string
  method: string
  path_prefix: string
  status: string
  since: string // datetime-local value, or an RFC 3339 time
  until: string
}

export const AUDIT_FIELDS = ['namespace', 'key_id', 'method', 'path_prefix', 'status', 'since', 'until'] as const
export const AUDIT_METHODS = ['POST', 'PUT', 'PATCH', 'DELETE', 'GET'] as const
export const AUDIT_PAGE = 50

export function emptyAuditForm(): AuditForm {
  return { namespace: '', key_id: '', method: '', path_prefix: '', status: '', since: '', until: '' }
}

export function auditFormFromQuery(q: URLSearchParams): AuditForm {
  const f = emptyAuditForm()
  for (const k of AUDIT_FIELDS) f[k] = (q.get(k) ?? '').trim()
  f.method = f.method.toUpperCase()
  return f
}

// auditQueryFromForm is the inverse of auditFormFromQuery; empty fields are
// left out so URLs stay short. A key that is not an admin's has no
// namespace filter.
export function auditQueryFromForm(f: AuditForm, admin: boolean): URLSearchParams {
  const q = new URLSearchParams()
  for (const k of AUDIT_FIELDS) {
    if (k === 'namespace' && !admin) continue
    const v = k === 'method' ? f[k].trim().toUpperCase() : f[k].trim()
    if (v) q.set(k, v)
  }
  return q
}

// auditProblem says what is wrong with a form the server would refuse
// (400), or undefined when it can be sent.
export function auditProblem(f: AuditForm): string | undefined {
  const st = f.status.trim()
  if (st && !(/^\d{3}$/.test(st) && +st >= 100 && +st <= 599)) return `Status must be an HTTP status (100–599), not "${st}".`
  for (const [name, v] of [['Since', f.since], ['Until', f.until]] as const) {
    if (v.trim() && !toRFC3339(v.trim())) return `${name} is not a time: "${v}".`
  }
  const since = toRFC3339(f.since.trim()), until = toRFC3339(f.until.trim())
  if (since && until && since >= until) return 'Since must be before until.'
  return undefined
}

// auditParams is GET /api/v1/audit's query for a form (already checked
// by auditProblem), a page's cursor and size.
export function auditParams(f: AuditForm, admin: boolean, cursor: string | null = null, limit = AUDIT_PAGE): URLSearchParams {
  const p = new URLSearchParams()
  if (admin && f.namespace.trim()) p.set('namespace', f.namespace.trim())
  if (f.key_id.trim()) p.set('key_id', f.key_id.trim())
  if (f.method.trim()) p.set('method', f.method.trim().toUpperCase())
  if (f.path_prefix.trim()) p.set('path_prefix', f.path_prefix.trim())
  if (f.status.trim()) p.set('status', f.status.trim())
  const since = toRFC3339(f.since.trim())
  if (since) p.set('since', since)
  const until = toRFC3339(f.until.trim())
  if (until) p.set('until', until)
  p.set('limit', String(limit))
  if (cursor) p.set('cursor', cursor)
  return p
}

export interface AuditList { records: AuditRecord[]; hasMore: boolean; cursor: string | null }

export const emptyAuditList: AuditList = { records: [], hasMore: false, cursor: null }

// appendAuditPage adds the next page after what is shown. Records are
// newest first; one already shown (the log grew between two pages of a
// refresh) is not shown twice.
export function appendAuditPage(list: AuditList, page: AuditPage): AuditList {
  const seen = new Set(list.records.map((r) => r.id))
  const records = list.records.concat((page.records ?? []).filter((r) => !seen.has(r.id)))
  return { records, hasMore: page.has_more && !!page.cursor, cursor: page.has_more ? page.cursor : null }
}

// statusTone: how a status is shown (a 4xx is a refusal, a 5xx a failure).
export function statusTone(status: number): 'ok' | 'refused' | 'failed' {
  if (status >= 500) return 'failed'
  if (status >= 400) return 'refused'
  return 'ok'
}

// whoLabel: the key's name, or what is known of a caller refused before
// anyone was identified.
export function whoLabel(r: AuditRecord): string {
  if (r.key_name) return r.key_name
  return r.key_id ? `unidentified (key ${r.key_id})` : 'unidentified'
}
