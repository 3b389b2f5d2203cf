// Formatting helpers shared by the views.
import type { JobRouting, Progress } from './api'

export function fmtNum(n: number | null | undefined): string {
  if (n === null || n === undefined || Number.isNaN(n)) return '—'
  const a = Math.abs(n)
  if (a < 1000) return String(Math.round(n * 100) / 100)
  if (a < 10_000) return n.toLocaleString('en-US', { maximumFractionDigits: 0 })
  if (a < 1e6) return (n / 1e3).toFixed(a < 1e5 ? 1 : 0) + 'k'
  if (a < 1e9) return (n / 1e6).toFixed(a < 1e7 ? 2 : 1) + 'M'
  return (n / 1e9).toFixed(2) + 'B'
}

export function fmtInt(n: number): string {
  return n.toLocaleString('en-US')
}

export function fmtRate(perSecond: number | null | undefined): string {
  if (perSecond === null || perSecond === undefined) return '—'
  if (perSecond === 0) return '0/s'
  if (perSecond >= 1) return fmtNum(Math.round(perSecond * 10) / 10) + '/s'
  return fmtNum(Math.round(perSecond * 60 * 10) / 10) + '/min'
}

// fmtDuration: 950 → "950ms", 4200 → "4.2s", 272000 → "4m 32s", hours and days likewise.
export function fmtDuration(ms: number): string {
  if (!Number.isFinite(ms)) return '—'
  if (ms < 0) ms = 0
  if (ms < 1000) return Math.round(ms) + 'ms'
  const s = ms / 1000
  if (s < 60) return (s < 10 ? s.toFixed(1) : Math.round(s).toString()) + 's'
  const m = Math.floor(s / 60)
  if (m < 60) return `${m}m ${Math.floor(s % 60)}s`
  const h = Math.floor(m / 60)
  if (h < 24) return `${h}h ${m % 60}m`
  return `${Math.floor(h / 24)}d ${h % 24}h`
}

export function fmtAgo(iso: string | null | undefined, now = Date.now()): string {
  if (!iso) return '—'
  const t = Date.parse(iso)
  if (Number.isNaN(t)) return '—'
  const d = now - t
  if (d < 0) return 'in ' + fmtDuration(-d).split(' ')[0]
  if (d < 5000) return 'just now'
  return fmtDuration(d).split(' ')[0] + ' ago'
}

export function fmtTime(iso: string | null | undefined): string {
  if (!iso) return '—'
  const d = new Date(iso)
  if (Number.isNaN(d.getTime())) return '—'
  return d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC').replace(/Z$/, ' UTC')
}

export function fmtClock(iso: string): string {
  const d = new Date(iso)
  if (Number.isNaN(d.getTime())) return iso
  return d.toISOString().slice(11, 23)
}

// preview renders a payload compactly on one line, cut to max characters.
export function preview(v: unknown, max = 60): string {
  let s: string
  try { s = JSON.stringify(v) ?? 'null' } catch { s = String(v) }
  return s.length > max ? s.slice(0, max - 1) + '…' : s
}

export function pretty(v: unknown): string {
  try { return JSON.stringify(v, null, 2) ?? 'null' } catch { return String(v) }
}

export interface NormProgress { current: number; total: number | null; message: string | null; percent: number | null }

// normProgress understands {current,total,message}, {percent} and a bare number (a percentage).
export function normProgress(p: unknown): NormProgress | null {
  if (p === null || p === undefined) return null
  if (typeof p === 'number') return { current: p, total: 100, message: null, percent: clamp(p) }
  if (typeof p !== 'object') return null
  const o = p as Progress & { percent?: number }
  const current = typeof o.current === 'number' ? o.current : typeof o.percent === 'number' ? o.percent : 0
  const total = typeof o.total === 'number' && o.total > 0 ? o.total : typeof o.percent === 'number' ? 100 : null
  const message = typeof o.message === 'string' ? o.message : null
  return { current, total, message, percent: total ? clamp((current / total) * 100) : null }
}

function clamp(x: number) { return Math.max(0, Math.min(100, x)) }

// shortId keeps the shard prefix and the ID's random tail (its distinctive
// part; the head of a ULID is a timestamp shared by neighbours).
export function shortId(id: string): string {
  if (id.length <= 20) return id
  const m = /^([a-z]+_\d+_)/.exec(id)
  const head = m ? m[1] : id.slice(0, 6)
  return head + '…' + id.slice(-8)
}

// fmtQuantiles renders p50 / p95 / p99 (milliseconds) as durations; "—"
// when there were no samples.
export function fmtQuantiles(q: { p50: number; p95: number; p99: number } | null | undefined): string {
  if (!q) return '—'
  return `${fmtDuration(q.p50)} / ${fmtDuration(q.p95)} / ${fmtDuration(q.p99)}`
}

// attemptsAllowed is how many attempts a job gets: the server retries a
// failed attempt while attempt < max_retries, so max_retries counts
// attempts, and a job with 0 still runs once.
export function attemptsAllowed(maxRetries: number): number {
  return Math.max(1, maxRetries)
}

// fmtAttempt says where a job is in its attempts, for the job page:
// "attempt 2 of 5", "attempt 1 of 1 (no retries)", "not run yet (up to 3 attempts)".
export function fmtAttempt(attempt: number, maxRetries: number): string {
  const total = attemptsAllowed(maxRetries)
  if (attempt <= 0) return total === 1 ? 'not run yet (1 attempt, no retries)' : `not run yet (up to ${total} attempts)`
  return `attempt ${attempt} of ${Math.max(total, attempt)}${total === 1 ? ' (no retries)' : ''}`
}

// fmtAttemptShort is the same for a table cell: "2 of 5", "1 of 1".
export function fmtAttemptShort(attempt: number, maxRetries: number): string {
  return `${attempt} of ${Math.max(attemptsAllowed(maxRetries), attempt)}`
}

// fmtBytes: 950 → "950 B", 9216 → "9.0 KiB", 3 MiB → "3.0 MiB".
export function fmtBytes(n: number): string {
  if (n < 1024) return `${n} B`
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`
  return `${(n / 1024 / 1024).toFixed(1)} MiB`
}

// rowPayload previews a search row's payload, or says how big it is when
// the page left it out (over 8 KiB).
export function rowPayload(j: { payload: unknown; payload_omitted?: boolean; payload_bytes?: number }, max = 60): string {
  if (j.payload_omitted) return `payload of ${fmtBytes(j.payload_bytes ?? 0)} — open the job`
  return preview(j.payload, max)
}

// fmtUSD: 0 → "$0", 0.00004 → "<$0.0001", 0.0351 → "$0.0351", 0.25 →
// "$0.25", 47.234 → "$47.23", 12345.6 → "$12,346". Cents hide what most
// single LLM calls cost, so below a dollar it shows up to four decimals.
export function fmtUSD(n: number | null | undefined): string {
  if (n === null || n === undefined || !Number.isFinite(n)) return '—'
  if (n === 0) return '$0'
  const sign = n < 0 ? '-' : ''
  const a = Math.abs(n)
  if (a < 0.0001) return `${sign}<$0.0001`
  if (a < 1) return `${sign}$${a.toFixed(4).replace(/(\.\d\d\d*?)0+$/, '$1')}`
  if (a < 10_000) return `${sign}$${a.toLocaleString('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 2 })}`
  return `${sign}$${Math.round(a).toLocaleString('en-US')}`
}

// routeNote says where a routed job's current model stands: "model 2 of
// 3 (fallback_on_error: a → b → c), 1 fallback after a provider error";
// "the only model (…)" for a job routed to one model.
export function routeNote(r: JobRouting): string {
  const n = r.order.length
  const pos = n <= 1 ? 'the only model' : `model ${r.index + 1} of ${n}`
  const fb = r.fallbacks > 0 ? `, ${r.fallbacks} ${r.fallbacks === 1 ? 'fallback' : 'fallbacks'} after a provider error` : ''
  return `${pos} (${r.strategy}: ${r.order.join(' → ')})${fb}`
}
