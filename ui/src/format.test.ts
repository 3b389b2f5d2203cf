import { describe, expect, it } from 'vitest'
import { fmtAgo, fmtDuration, fmtNum, fmtRate, normProgress, preview, shortId } from './format'
import { Series } from './history'
import { rates, recordQueues, history, totals } from './queues'
import { match } from './router'
import type { Queue } from './api'

describe('formatting', () => {
  it('numbers', () => {
    expect([0, 42, 999, 1203, 12_400, 142_000, 2_500_000, 3e9].map(fmtNum)).toEqual(['0', '42', '999', '1,203', '12.4k', '142k', '2.50M', '3.00B'])
    expect(fmtNum(null)).toBe('—')
  })
  it('rates switch to per minute below one per second', () => {
    expect(fmtRate(124 / 60)).toBe('2.1/s')
    expect(fmtRate(0.3)).toBe('18/min')
    expect(fmtRate(0)).toBe('0/s')
    expect(fmtRate(null)).toBe('—')
  })
  it('durations and ages', () => {
    expect([950, 4200, 45_000, 272_000, 3 * 3600e3 + 5 * 60e3, 26 * 3600e3].map(fmtDuration)).toEqual(['950ms', '4.2s', '45s', '4m 32s', '3h 5m', '1d 2h'])
    const now = Date.parse('2026-02-11T10:00:00Z')
    expect(fmtAgo('2026-02-11T09:58:00Z', now)).toBe('2m ago')
    expect(fmtAgo('2026-02-11T09:59:58Z', now)).toBe('just now')
    expect(fmtAgo(null, now)).toBe('—')
  })
  it('payload previews are cut', () => {
    expect(preview({ to: 'a@example.com', template: 'welcome' }, 20)).toBe('{"to":"a@example.co…')
    expect(preview(null)).toBe('null')
  })
  it('short ids keep the shard and the tail', () => {
    expect(shortId('job_2_01JD5Q8Y6Z3M4N5P6Q7R8S9T0V')).toBe('job_2_…7R8S9T0V')
    expect(shortId('short')).toBe('short')
  })
  it('progress in every shape workers send', () => {
    expect(normProgress({ current: 450, total: 1000, message: 'Sending' })).toEqual({ current: 450, total: 1000, message: 'Sending', percent: 45 })
    expect(normProgress(30)).toEqual({ current: 30, total: 100, message: null, percent: 30 })
    expect(normProgress({ percent: 70 })).toEqual({ current: 70, total: 100, message: null, percent: 70 })
    expect(normProgress({ current: 5 })).toEqual({ current: 5, total: null, message: null, percent: null })
    expect(normProgress({ current: 150, total: 100 })!.percent).toBe(100)
    expect(normProgress(null)).toBeNull()
    expect(normProgress('x')).toBeNull()
  })
})

describe('Series', () => {
  it('aligns new and missing columns and keeps the last cap points', () => {
    const s = new Series(3)
    s.add(1, { a: 1 })
    s.add(2, { a: 2, b: 20 })
    s.add(2, { a: 99 }) // not after the last sample: ignored
    s.add(3, { b: 30 })
    s.add(4, { a: 4, b: 40 })
    expect(s.data(['a', 'b', 'c'])).toEqual([[2, 3, 4], [2, null, 4], [20, 30, 40], [null, null, null]])
  })
})

const q = (name: string, over: Partial<Queue> = {}): Queue => ({
  name, pending: 0, active: 0, scheduled: 0, retrying: 0, completed: 0, dead: 0, cancelled: 0, paused: false,
  max_concurrency: null, throttle: null, throughput: null, ...over,
})

describe('queue history', () => {
  it('computes rates from the totals between samples, else uses the server average', () => {
    const a = q('a', { totals: { enqueued: 100, completed: 80, failed: 2, dead: 0 }, throughput: { enqueued_per_s: 9, completed_per_s: 8, failed_per_s: 1 } })
    expect(rates(a, 10, undefined)).toEqual({ enq: 9, done: 8, fail: 1 })
    expect(rates(a, 10, { t: 5, enq: 50, done: 60, fail: 2 })).toEqual({ enq: 10, done: 4, fail: 0 })
  })
  it('records per-queue and total series', () => {
    recordQueues([q('x', { pending: 3, totals: { enqueued: 10, completed: 0, failed: 0, dead: 0 } }), q('y', { pending: 2, active: 1, scheduled: 1, retrying: 1 })], 1000)
    recordQueues([q('x', { pending: 1, totals: { enqueued: 30, completed: 20, failed: 0, dead: 0 } }), q('y', { pending: 2 })], 1010)
    const [t, pending, done] = history.data(['*|pending', 'x|done'])
    expect(t.slice(-2)).toEqual([1000, 1010])
    expect(pending.slice(-2)).toEqual([5, 3])
    expect(done.slice(-1)).toEqual([2])
  })
  it('totals count paused queues', () => {
    expect(totals([q('a', { pending: 2, dead: 1, paused: true }), q('b', { pending: 3 })])).toMatchObject({ pending: 5, dead: 1, paused: 1 })
  })
})

describe('router.match', () => {
  it('matches and decodes parameters', () => {
    expect(match('/queues/:name', '/queues/emails.send')).toEqual({ name: 'emails.send' })
    expect(match('/jobs/:id', '/jobs/job_2_X%2FY')).toEqual({ id: 'job_2_X/Y' })
    expect(match('/jobs/:id', '/jobs')).toBeNull()
    expect(match('/queues', '/jobs')).toBeNull()
    expect(match('/jobs/:id', '/jobs/%E0%A4%A')).toBeNull()
  })
})
