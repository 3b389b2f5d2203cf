// The cost page's and the job page's arithmetic on usage: money, the
// spend-over-time series, shares for the bars, a job's usage by attempt,
// how much of a budget is used.
import { USAGE_PERIODS, type Budget, type BudgetAction, type JobUsage, type UsageGroup, type UsagePeriod, type UsageReport, type UsageSummary } from './api'

import { fmtNum, fmtUSD } from './format'

export { fmtUSD }

// fmtPercent: 0.2427 → "24.3%", 0.25 → "25%", 0 → "0%", 1 → "100%".
export function fmtPercent(r: number): string {
  if (!Number.isFinite(r)) return '—'
  return `${Number((r * 100).toFixed(1))}%`
}

export function isPeriod(v: string | null): v is UsagePeriod {
  return v !== null && (USAGE_PERIODS as readonly string[]).includes(v)
}

const HOUR = 3600
const DAY = 24 * HOUR
const PERIOD_S: Record<UsagePeriod, number> = { '24h': DAY, '7d': 7 * DAY, '30d': 30 * DAY }

// bucketOf is the summary's time bucket for a period: hours up to a week
// (168 points), days for 30 days.
export function bucketOf(p: UsagePeriod): 'hour' | 'day' {
  return p === '30d' ? 'day' : 'hour'
}

// spendSeries is the chart's data for a group_by=hour|day summary: every
// bucket of the period from the one holding its start to the one holding
// now (Unix seconds), oldest first, 0 where the server had no report
// (it leaves such buckets out), and the cost of each.
export function spendSeries(s: UsageSummary, period: UsagePeriod, nowS: number): [number[], number[]] {
  const step = bucketOf(period) === 'day' ? DAY : HOUR
  const first = Math.floor((nowS - PERIOD_S[period]) / step) * step
  const last = Math.floor(nowS / step) * step
  const byStart = new Map<number, number>()
  for (const g of s.groups) {
    if (g.key === null) continue
    const t = Date.parse(g.key) / 1000
    if (Number.isFinite(t)) byStart.set(t, (byStart.get(t) ?? 0) + g.cost_usd)
  }
  const ts: number[] = []
  const cost: number[] = []
  for (let t = first; t <= last; t += step) {
    ts.push(t)
    cost.push(byStart.get(t) ?? 0)
  }
  return [ts, cost]
}

export interface ShareRow { key: string | null; group: UsageGroup; share: number }

// shares gives each group its part of the largest group's cost (the
// bars: the top one is full width), and of the total (the label).
export function shares(groups: UsageGroup[]): ShareRow[] {
  const top = groups.reduce((m, g) => Math.max(m, g.cost_usd), 0)
  return groups.map((g) => ({ key: g.key, group: g, share: top > 0 ? g.cost_usd / top : 0 }))
}

// costPerJob: the summary gives it per group; the totals' as well, but an
// older server may not, so it is worked out when missing.
export function costPerJob(t: { cost_usd: number; jobs: number; cost_per_job_usd?: number }): number {
  if (typeof t.cost_per_job_usd === 'number') return t.cost_per_job_usd
  return t.jobs > 0 ? t.cost_usd / t.jobs : 0
}

export interface AttemptUsage {
  attempt: number
  reports: UsageReport[]
  input_tokens: number; output_tokens: number; cost_usd: number
  models: string[]
}

// usageByAttempt groups a job's reports by attempt (oldest first), with
// each attempt's totals and the models it used.
export function usageByAttempt(u: JobUsage): AttemptUsage[] {
  const out: AttemptUsage[] = []
  for (const r of u.reports) {
    let a = out.find((x) => x.attempt === r.attempt)
    if (!a) {
      a = { attempt: r.attempt, reports: [], input_tokens: 0, output_tokens: 0, cost_usd: 0, models: [] }
      out.push(a)
    }
    a.reports.push(r)
    a.input_tokens += r.input_tokens
    a.output_tokens += r.output_tokens
    // Costs are exact to 1e-9 USD on the server: round the float sum there.
    a.cost_usd = Math.round((a.cost_usd + r.cost_usd) * 1e9) / 1e9
    if (r.model && !a.models.includes(r.model)) a.models.push(r.model)
  }
  return out.sort((x, y) => x.attempt - y.attempt)
}

// modelsOf names the distinct models and providers a job's reports used,
// in the order first seen: "claude-sonnet-4-5 (anthropic), gpt-4o (openai)".
export function modelsOf(u: JobUsage): string {
  const seen: string[] = []
  for (const r of u.reports) {
    if (!r.model && !r.provider) continue
    const s = r.model ? (r.provider ? `${r.model} (${r.provider})` : r.model) : `(${r.provider})`
    if (!seen.includes(s)) seen.push(s)
  }
  return seen.join(', ')
}

// A budget's scope for people: what it covers, and the queue to link to.
export interface ScopeText { kind: 'queue' | 'tag' | 'global' | 'other'; label: string; queue?: string }

export function scopeText(scope: string): ScopeText {
  if (scope === 'global') return { kind: 'global', label: 'every job' }
  if (scope.startsWith('queue:')) return { kind: 'queue', label: scope.slice(6), queue: scope.slice(6) }
  if (scope.startsWith('tag:')) return { kind: 'tag', label: scope.slice(4) }
  return { kind: 'other', label: scope }
}

export const ON_EXCEED_TEXT: Record<BudgetAction, string> = {
  hold: 'hold new jobs',
  reject: 'reject new jobs',
  alert_only: 'alert only',
}

// How near a day's spend is to its limit: under 80 %, from 80 %, spent.
export type BudgetLevel = 'ok' | 'near' | 'over'
export interface BudgetUse {
  share: number | null // of the daily limit, 0–1 (the bar); null: no daily limit
  level: BudgetLevel
  text: string // "$12.34 of $50 (24.7%)", or "$12.34 today" without a daily limit
}

// budgetUse is a budget's day so far: the bar's fill, its colour and its
// words. The server's `exceeded` wins (its sum is the one enqueues
// decide by); a limit of 0 is spent from the start.
export function budgetUse(b: Budget): BudgetUse {
  if (b.daily_usd === null) return { share: null, level: b.exceeded ? 'over' : 'ok', text: `${fmtUSD(b.spent_usd)} today` }
  const r = b.daily_usd > 0 ? b.spent_usd / b.daily_usd : 1
  const level: BudgetLevel = b.exceeded || r >= 1 ? 'over' : r >= 0.8 ? 'near' : 'ok'
  const pct = b.daily_usd > 0 ? ` (${fmtPercent(r)})` : ''
  return { share: Math.min(Math.max(r, 0), 1), level, text: `${fmtUSD(b.spent_usd)} of ${fmtUSD(b.daily_usd)}${pct}` }
}

// limitUse is a provider's use of one of its limits in the last minute
// (the window summed over the shards): the bar, its colour (amber from
// 80 %, red at the limit) and its words; no limit, no bar.
export function limitUse(used: number, limit: number | null): BudgetUse {
  if (limit === null) return { share: null, level: 'ok', text: `${fmtCount(used)} (no limit)` }
  const r = limit > 0 ? used / limit : 1
  const level: BudgetLevel = r >= 1 ? 'over' : r >= 0.8 ? 'near' : 'ok'
  return { share: Math.min(Math.max(r, 0), 1), level, text: `${fmtCount(used)} of ${fmtCount(limit)}` }
}

// fmtCount is fmtNum without a zero fraction: 50000 → "50k", 12345 → "12.3k".
function fmtCount(n: number): string {
  return fmtNum(n).replace(/\.0+(?=[kMB]$)/, '')
}
