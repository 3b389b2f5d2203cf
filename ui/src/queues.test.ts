import { describe, expect, it, beforeEach } from 'vitest'
import { addHistory, history, recordQueues, resetHistory, ALL } from './queues'
import { xRange } from './components/Chart'
import { fmtQuantiles } from './format'
import type { Queue, QueueHistory } from './api'

const col = (vals: (number | null)[]) => vals
const series = (v: number | null) => ({
  enqueued_per_s: col([null, v]), completed_per_s: col([null, v]), failed_per_s: col([null, 0]),
  pending: col([3, 4]), active: col([1, 1]), waiting: col([0, 0]), oldest_pending_s: col([5, 6]),
})

describe('server history', () => {
  beforeEach(() => resetHistory())

  it('fills the charts from the server before the tab samples', () => {
    const h: QueueHistory = {
      step_s: 10, t: [1000, 1010], total: series(2),
      queues: [{ name: 'emails', latency: null, ...series(2) }],
    }
    addHistory(h)
    expect(history.t).toEqual([1010, 1020])
    expect(history.data([`${ALL}|done`, 'emails|pending', `${ALL}|oldest`])).toEqual([[1010, 1020], [null, 2], [3, 4], [5, 6]])
    // The tab's own samples follow; a second history is not added on top.
    const q = { name: 'emails', pending: 7, active: 0, scheduled: 0, retrying: 0, completed: 0, dead: 0, cancelled: 0, paused: false,
      max_concurrency: null, throttle: null, throughput: null } as Queue
    recordQueues([q], 1025)
    addHistory(h)
    expect(history.t).toEqual([1010, 1020, 1025])
    expect(history.data(['emails|pending'])[1]).toEqual([3, 4, 7])
  })

  it('keeps the time axis near now without data', () => {
    expect(xRange(null, null, 2000)).toEqual([1700, 2000])
    expect(xRange(1990, 1990, 2000)).toEqual([1930, 1990])
    expect(xRange(100, 1990, 2000)).toEqual([100, 1990])
  })

  it('formats latency quantiles', () => {
    expect(fmtQuantiles(null)).toBe('—')
    expect(fmtQuantiles({ p50: 12, p95: 250, p99: 1200 })).toBe('12ms / 250ms / 1.2s')
  })
})
