// @vitest-environment jsdom
// Batches and dependencies (issue 19): the batch page's counts and
// callback, a job's children, and the lazily loaded pages.
import { afterEach, describe, expect, it, vi } from 'vitest'
import { cleanup, render, screen, waitFor } from '@testing-library/preact'
import { BatchPage, batchCounts } from './pages/Batch'
import { CHILD_LOOKUPS, Dependents } from './pages/JobDetail'
import { lazy } from './components/lazy'
import type { Batch, JobRow } from './api'

afterEach(() => { cleanup(); vi.unstubAllGlobals() })

function json(body: unknown, status = 200) {
  return new Response(JSON.stringify(body), { status, headers: { 'Content-Type': 'application/json' } })
}

const batch = (over: Partial<Batch> = {}): Batch => ({
  id: 'batch_1_01J', total: 10, pending: 3, succeeded: 6, failed: 1, callback_queue: 'images.done', callback_payload: { album: 42 },
  callback_job_id: null, created_at: '2026-02-11T10:00:00Z', completed_at: null, ...over,
})

const child = (i: number, state = 'held'): JobRow => ({
  id: `job_0_01JCHILD${String(i).padStart(4, '0')}`, queue: 'publish', state: state as JobRow['state'], priority: 'normal', payload: {}, attempt: 0, max_retries: 3,
  created_at: '2026-02-11T10:00:00Z', scheduled_at: null, started_at: null, completed_at: null, last_error: null, error_count: 0, reason: null,
  tags: {}, batch_id: null, unique_key: null, worker_id: null, progress: null,
})

describe('batchCounts', () => {
  it('counts the finished members, the failed ones and what is left', () => {
    expect(batchCounts(batch())).toEqual({ finished: 7, done: false, text: '7 of 10 finished, 1 failed, 3 to go' })
    expect(batchCounts(batch({ pending: 0, succeeded: 10, failed: 0 }))).toEqual({ finished: 10, done: true, text: '10 of 10 finished' })
  })
})

describe('the batch page', () => {
  it('shows the counts, links them to its members by state, and lists the members by batch_id', async () => {
    const searches: unknown[] = []
    vi.stubGlobal('fetch', vi.fn(async (u: string, init?: RequestInit) => {
      if (u === '/api/v1/batches/batch_1_01J') return json(batch())
      if (u === '/api/v1/jobs/search') { searches.push(JSON.parse(String(init?.body))); return json({ jobs: [child(1, 'completed')], total: 1, cursor: null, has_more: false, duration_ms: 1 }) }
      return json({ error: 'no', code: 'not_found' }, 404)
    }))
    render(<BatchPage id="batch_1_01J" query={new URLSearchParams('state=completed')} />)
    await waitFor(() => expect(screen.getByTestId('batch-total').textContent).toBe('10'))
    expect(screen.getByTestId('batch-failed').closest('a')!.getAttribute('href')).toBe('/ui/batches/batch_1_01J?state=dead,cancelled')
    expect(screen.getByTestId('batch-callback').textContent).toContain('once every job has finished')
    expect(screen.getByRole('progressbar', { name: /^Batch progress/ }).getAttribute('aria-valuenow')).toBe('7')
    await waitFor(() => expect(searches.length).toBeGreaterThan(0))
    expect(searches[0]).toMatchObject({ batch_id: 'batch_1_01J', state: ['completed'] })
    await waitFor(() => expect(document.querySelector('tr[data-job]')).not.toBeNull())
  })

  it('links the callback job once it exists, with its state', async () => {
    vi.stubGlobal('fetch', vi.fn(async (u: string) => {
      if (u.startsWith('/api/v1/batches/')) return json(batch({ pending: 0, succeeded: 9, callback_job_id: 'job_3_01JCB', completed_at: '2026-02-11T10:05:00Z' }))
      if (u === '/api/v1/jobs/job_3_01JCB') return json({ id: 'job_3_01JCB', state: 'pending' })
      return json({ jobs: [], total: 0, cursor: null, has_more: false, duration_ms: 0 })
    }))
    render(<BatchPage id="batch_1_01J" query={new URLSearchParams()} />)
    const cb = await screen.findByTestId('batch-callback')
    await waitFor(() => expect(cb.querySelector('a')?.getAttribute('href')).toBe('/ui/jobs/job_3_01JCB'))
    await waitFor(() => expect(cb.textContent).toContain('pending'))
  })

  it('says so when there is no such batch', async () => {
    vi.stubGlobal('fetch', vi.fn(async () => json({ error: 'batch not found', code: 'not_found' }, 404)))
    render(<BatchPage id="batch_9_nope" query={new URLSearchParams()} />)
    await screen.findByText('Batch not found')
  })
})

describe("a job's children", () => {
  it('are searched by depends_on and linked with their states, with a link to all of them past the first page', async () => {
    const bodies: { depends_on?: string; limit?: number }[] = []
    vi.stubGlobal('fetch', vi.fn(async (_u: string, init?: RequestInit) => {
      bodies.push(JSON.parse(String(init?.body)))
      return json({ jobs: Array.from({ length: CHILD_LOOKUPS }, (_, i) => child(i, i ? 'held' : 'pending')), total: 25, cursor: 'c', has_more: true, duration_ms: 1 })
    }))
    render(<dl><Dependents id="job_2_PARENT" /></dl>)
    const dd = await screen.findByTestId('dependents')
    expect(bodies[0]).toMatchObject({ depends_on: 'job_2_PARENT', limit: CHILD_LOOKUPS })
    expect(dd.textContent).toContain('25 jobs')
    const links = [...dd.querySelectorAll('a')].map((a) => a.getAttribute('href'))
    expect(links[0]).toBe('/ui/jobs/job_0_01JCHILD0000')
    expect(links).toHaveLength(CHILD_LOOKUPS + 1)
    expect(links[CHILD_LOOKUPS]).toBe('/ui/jobs?depends_on=job_2_PARENT')
    expect(dd.querySelector('.badge')!.textContent).toBe('pending')
  })

  it('show nothing when no job waits on it, or the server cannot search by depends_on', async () => {
    let n = 0
    vi.stubGlobal('fetch', vi.fn(async () => (n++ === 0
      ? json({ jobs: [], total: 0, cursor: null, has_more: false, duration_ms: 0 })
      : json({ error: 'unknown field "depends_on"', code: 'invalid_request' }, 400))))
    const { container } = render(<dl><Dependents id="job_2_A" /></dl>)
    await waitFor(() => expect(n).toBe(1))
    expect(container.querySelector('dd')).toBeNull()
    cleanup()
    const second = render(<dl><Dependents id="job_2_B" /></dl>)
    await waitFor(() => expect(n).toBe(2))
    expect(second.container.querySelector('dd')).toBeNull()
  })
})

describe('lazy', () => {
  it('renders the fallback, then the loaded component; loads the module once', async () => {
    let loads = 0
    const Hello = lazy<{ name: string }>(async () => { loads++; return ({ name }) => <p>hello {name}</p> }, ({ name }) => <p>loading {name}</p>)
    render(<Hello name="a" />)
    expect(screen.getByText('loading a')).toBeTruthy()
    await screen.findByText('hello a')
    cleanup()
    render(<Hello name="b" />)
    expect(screen.getByText('hello b')).toBeTruthy() // already loaded: no fallback
    expect(loads).toBe(1)
  })

  it('says when a chunk fails to load and tries again on the next mount', async () => {
    let loads = 0
    const Flaky = lazy<object>(async () => { if (loads++ === 0) throw new Error('network down'); return () => <p>loaded</p> })
    render(<Flaky />)
    expect((await screen.findByRole('alert')).textContent).toContain('network down')
    cleanup()
    render(<Flaky />)
    await screen.findByText('loaded')
    expect(loads).toBe(2)
  })
})
