// Queue history: every time the UI loads the queue list it records a sample
// here, so the charts show throughput and depth over the time the tab has
// been open (up to the last 30 minutes at one sample per 5 s).
import type { Queue } from './api'
import { Series } from './history'

export const history = new Series(360)
const prev = new Map<string, { t: number; enq: number; done: number; fail: number }>()

export const ALL = '*'

// rates computes per-second rates from the change in the queue's totals
// since the previous sample; before there is one (or without totals) it
// uses the server's one-minute average.
export function rates(q: Queue, t: number, last: { t: number; enq: number; done: number; fail: number } | undefined) {
  if (q.totals && last && t > last.t) {
    const dt = t - last.t
    return {
      enq: Math.max(0, (q.totals.enqueued - last.enq) / dt),
      done: Math.max(0, (q.totals.completed - last.done) / dt),
      fail: Math.max(0, (q.totals.failed - last.fail) / dt),
    }
  }
  return { enq: q.throughput?.enqueued_per_s ?? 0, done: q.throughput?.completed_per_s ?? 0, fail: q.throughput?.failed_per_s ?? 0 }
}

export function recordQueues(qs: Queue[], now = Date.now() / 1000, extra: Record<string, number | null> = {}) {
  if (history.length && now - history.t[history.length - 1] < 0.9) return
  const v: Record<string, number | null> = { ...extra }
  let enq = 0, done = 0, fail = 0, pending = 0, active = 0, waiting = 0
  for (const q of qs) {
    const r = rates(q, now, prev.get(q.name))
    if (q.totals) prev.set(q.name, { t: now, enq: q.totals.enqueued, done: q.totals.completed, fail: q.totals.failed })
    v[`${q.name}|enq`] = r.enq
    v[`${q.name}|done`] = r.done
    v[`${q.name}|fail`] = r.fail
    v[`${q.name}|pending`] = q.pending
    v[`${q.name}|active`] = q.active
    v[`${q.name}|waiting`] = q.scheduled + q.retrying
    enq += r.enq; done += r.done; fail += r.fail
    pending += q.pending; active += q.active; waiting += q.scheduled + q.retrying
  }
  Object.assign(v, { [`${ALL}|enq`]: enq, [`${ALL}|done`]: done, [`${ALL}|fail`]: fail, [`${ALL}|pending`]: pending, [`${ALL}|active`]: active, [`${ALL}|waiting`]: waiting })
  history.add(now, v)
}

export function totals(qs: Queue[]) {
  const t = { pending: 0, active: 0, scheduled: 0, retrying: 0, completed: 0, dead: 0, cancelled: 0, held: 0, paused: 0 }
  for (const q of qs) {
    t.pending += q.pending; t.active += q.active; t.scheduled += q.scheduled; t.retrying += q.retrying
    t.completed += q.completed; t.dead += q.dead; t.cancelled += q.cancelled; t.held += q.held ?? 0
    if (q.paused) t.paused++
  }
  return t
}
