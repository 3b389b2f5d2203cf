// @vitest-environment jsdom
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest'
import { act, cleanup, render } from '@testing-library/preact'
import { emit, RateGate, useLive, type JobEvent } from './live'

const ev = (over: Partial<JobEvent> = {}): JobEvent => ({ type: 'enqueued', job_id: 'j1', queue: 'q', ...over })

function Probe(props: { load: () => Promise<number>; match?: (e: JobEvent) => boolean; onEvent?: (e: JobEvent) => void }) {
  const { data } = useLive(props.load, 'k', { match: props.match, onEvent: props.onEvent, minGapMs: 1000, pollOfflineMs: 3000, pollLiveMs: 15000 })
  return <span data-testid="v">{data ?? 'none'}</span>
}

beforeEach(() => { vi.useFakeTimers() })
afterEach(() => { cleanup(); vi.useRealTimers() })

async function flush() { await act(async () => { await Promise.resolve() }) }

describe('useLive', () => {
  it('loads once, coalesces a burst of events into one reload per gap, and ignores events that do not match', async () => {
    let n = 0
    const load = vi.fn(async () => ++n)
    const r = render(<Probe load={load} match={(e) => e.queue === 'q'} />)
    await flush()
    expect(load).toHaveBeenCalledTimes(1)
    expect(r.getByTestId('v').textContent).toBe('1')
    for (let i = 0; i < 50; i++) emit(ev())
    emit(ev({ queue: 'other' }))
    await act(async () => { vi.advanceTimersByTime(1000) })
    await flush()
    expect(load).toHaveBeenCalledTimes(2)
    expect(r.getByTestId('v').textContent).toBe('2')
    emit(ev({ queue: 'other' }))
    await act(async () => { vi.advanceTimersByTime(1500) })
    expect(load).toHaveBeenCalledTimes(2)
  })

  it('reloads on a reset whatever the filter, and polls while the stream is down', async () => {
    const load = vi.fn(async () => 1)
    render(<Probe load={load} match={() => false} />)
    await flush()
    emit('reset')
    await act(async () => { vi.advanceTimersByTime(1000) })
    expect(load).toHaveBeenCalledTimes(2)
    await act(async () => { vi.advanceTimersByTime(3000) })
    expect(load).toHaveBeenCalledTimes(3)
  })

  it('hands every event to onEvent (progress is shown without waiting for a reload)', async () => {
    const seen: string[] = []
    render(<Probe load={async () => 1} match={() => false} onEvent={(e) => seen.push(e.type)} />)
    await flush()
    emit(ev({ type: 'progress', progress: { current: 1, total: 2 } }))
    expect(seen).toEqual(['progress'])
  })

  it('keeps the last data and reports the error when a reload fails', async () => {
    let fail = false
    const load = vi.fn(async () => { if (fail) throw new Error('boom'); return 7 })
    function P() {
      const { data, error } = useLive(load, 'k2', { pollOfflineMs: 3000 })
      return <span data-testid="v">{data}:{error?.message ?? ''}</span>
    }
    const r = render(<P />)
    await flush()
    fail = true
    await act(async () => { vi.advanceTimersByTime(3000) })
    await flush()
    expect(r.getByTestId('v').textContent).toBe('7:boom')
  })
})

describe('RateGate', () => {
  it('trips after `seconds` consecutive seconds over the limit, not on one burst', () => {
    const g = new RateGate(10, 3)
    const second = (t: number, n: number) => { let tripped = false; for (let i = 0; i < n; i++) tripped = g.hit(t + i) || tripped; return tripped }
    expect(second(0, 50)).toBe(false) // a burst: counted when the next window starts
    expect(second(1000, 5)).toBe(false)
    expect(second(2000, 50)).toBe(false)
    expect(second(3000, 50)).toBe(false)
    expect(second(4000, 50)).toBe(false)
    expect(second(5000, 1)).toBe(true) // 3 full seconds over the limit
  })
  it('a quiet gap resets the streak', () => {
    const g = new RateGate(10, 2)
    for (let i = 0; i < 50; i++) g.hit(i)
    for (let i = 0; i < 50; i++) g.hit(1000 + i)
    expect(g.hit(10_000)).toBe(false)
  })
})

