// The job page's scores: their values for people, each score's rows, and
// each dimension's mean over the job's scores.
import type { JobScore } from './api'

// fmtScore shows a score as posted, rounded for reading: 0.92 → "0.92",
// 0.123456 → "0.1235", 4 → "4", 1234.5678 → "1,234.57", -0.5 → "-0.5",
// 2500000 → "2,500,000" (scores are not counts: no "2.5M").
export function fmtScore(v: number): string {
  if (!Number.isFinite(v)) return '—'
  const a = Math.abs(v)
  if (a > 0 && a < 1) return String(Number(v.toPrecision(4)))
  return v.toLocaleString('en-US', { maximumFractionDigits: 2 })
}

export interface ScoreRow { dimension: string; value: number; score: JobScore; first: boolean }

// scoreRows lists every dimension of every score, a score's dimensions by
// name, the scores in the server's order (oldest first); `first` marks a
// score's first row (where its scorer, time and comment go).
export function scoreRows(scores: JobScore[]): ScoreRow[] {
  const out: ScoreRow[] = []
  for (const s of scores) {
    const dims = Object.keys(s.dimensions).sort()
    dims.forEach((d, i) => out.push({ dimension: d, value: s.dimensions[d], score: s, first: i === 0 }))
  }
  return out
}

export interface DimensionMean { dimension: string; mean: number; count: number }

// dimensionMeans is each dimension's mean over the job's scores that
// have it, by name.
export function dimensionMeans(scores: JobScore[]): DimensionMean[] {
  const acc = new Map<string, { sum: number; count: number }>()
  for (const s of scores) {
    for (const [d, v] of Object.entries(s.dimensions)) {
      const a = acc.get(d) ?? { sum: 0, count: 0 }
      a.sum += v
      a.count++
      acc.set(d, a)
    }
  }
  return [...acc.entries()].sort(([x], [y]) => (x < y ? -1 : x > y ? 1 : 0)).map(([dimension, a]) => ({ dimension, mean: a.sum / a.count, count: a.count }))
}
