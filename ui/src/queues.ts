// Queue history behind the charts: on the first load of a tab the server's
// history of the last 30 minutes (GET /queues/history, 10 s points kept by
// the server), then a sample every time the UI loads the queue list, so
// the charts show the recent past at once and move while the tab is open.
import { api, type Queue, type QueueHistory } from './api'
import { Series } from './history'

export const history = new Series(360)
const prev = new Map<string, { t: number; enq: number; done: number; fail: number }>()

export const ALL = '*'

// HISTORY_SINCE is how far back the charts start (the server keeps 24 h).
export const HISTORY_SINCE = '30m'

let loading: Promise<void> | null = null

// loadHistory fills the series from the server's history, once per tab
// (the first page with a chart asks; later ones reuse it). A failure
// leaves the charts to the tab's own samples and is tried again next time.
export function loadHistory(signal?: AbortSignal): Promise<void> {
  if (!loading) {
    loading = api.queueHistory(HISTORY_SINCE, signal).then(addHistory, () => { loading = null })
  }
  return loading
}

// addHistory adds the server's points (each at its bucket's end) before
// any sample the tab took.
export function addHistory(h: QueueHistory) {
  if (history.length) return
  const cols: [string, (number | null)[]][] = [
    [`${ALL}|enq`, h.total.enqueued_per_s], [`${ALL}|done`, h.total.completed_per_s], [`${ALL}|fail`, h.total.failed_per_s],
    [`${ALL}|pending`, h.total.pending], [`${ALL}|active`, h.total.active], [`${ALL}|waiting`, h.total.waiting],
    [`${ALL}|oldest`, h.total.oldest_pending_s],
  ]
  for (const q of h.queues) {
    cols.push([`${q.name}|enq`, q.enqueued_per_s], [`${q.name}|done`, q.completed_per_s], [`${q.name}|fail`, q.failed_per_s],
      [`${q.name}|pending`, q.pending], [`${q.name}|active`, q.active], [`${q.name}|waiting`, q.waiting])
  }
  h.t.forEach((t, i) => {
    const v: Record<string, number | null> = {}
    let any = false
    for (const [k, col] of cols) {
      v[k] = col[i] ?? null
      if (v[k] !== null) any = true
    }
    if (any) history.add(t + h.step_s, v)
  })
}

// resetHistory forgets everything (tests).
export function resetHistory() {
  loading = null
  prev.clear()
  history.clear()
}

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
