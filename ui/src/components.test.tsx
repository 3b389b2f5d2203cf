// @vitest-environment jsdom
import { afterEach, beforeAll, describe, expect, it, vi } from 'vitest'
import { cleanup, fireEvent, render, screen, waitFor } from '@testing-library/preact'
import { ProgressBar, StateBadge } from './components/ui'
import { BulkDialog, BulkProgress, buildRequest, sendBulk } from './components/Bulk'
import { attemptsOf, timelineOf } from './pages/JobDetail'
import type { Job, JobRow } from './api'

beforeAll(() => {
  // jsdom has <dialog> but not its modal methods.
  HTMLDialogElement.prototype.showModal = function () { this.setAttribute('open', '') }
  HTMLDialogElement.prototype.close = function () { this.removeAttribute('open') }
})
afterEach(() => { cleanup(); vi.unstubAllGlobals() })

const row = (id: string, state = 'dead'): JobRow => ({
  id, queue: 'q', state: state as JobRow['state'], priority: 'normal', payload: { n: id }, attempt: 1, max_retries: 1,
  created_at: '2026-02-11T10:00:00Z', scheduled_at: null, started_at: null, completed_at: null, last_error: 'boom',
  error_count: 1, reason: null, tags: {}, batch_id: null, unique_key: null, worker_id: null, progress: null,
})

describe('ProgressBar', () => {
  it('shows current/total, percent and message, with ARIA values', () => {
    render(<ProgressBar progress={{ current: 450, total: 1000, message: 'Sending batch' }} label="Job progress" />)
    const bar = screen.getByRole('progressbar', { name: 'Job progress' })
    expect(bar.getAttribute('aria-valuenow')).toBe('450')
    expect(bar.getAttribute('aria-valuemax')).toBe('1000')
    expect(screen.getByTestId('progress-text').textContent).toBe('450 / 1,000 (45%) — Sending batch')
  })
  it('renders nothing without progress', () => {
    const { container } = render(<ProgressBar progress={null} />)
    expect(container.innerHTML).toBe('')
  })
  it('badges carry their state as a class', () => {
    render(<StateBadge state="dead" />)
    expect(screen.getByText('dead').className).toContain('s-dead')
  })
})

describe('bulk requests', () => {
  it('a selection sends ids; a search sends its filter without paging; big ones go async', () => {
    expect(buildRequest('retry', { ids: ['a', 'b'], count: 2, description: '', sample: [] }, {})).toEqual({ action: 'retry', job_ids: ['a', 'b'] })
    expect(buildRequest('move', { filter: { queue: 'q', state: ['dead'], cursor: 'c', limit: 50, sort: 'created_at', order: 'desc' }, count: 5000, description: '', sample: [] }, { queue: 'q2' }))
      .toEqual({ action: 'move', filter: { queue: 'q', state: ['dead'] }, confirm: true, move_to_queue: 'q2', async: true })
  })
  it('falls back to a synchronous request on a server without async bulk', async () => {
    const bodies: unknown[] = []
    vi.stubGlobal('fetch', vi.fn(async (_u: string, init: RequestInit) => {
      const b = JSON.parse(init.body as string)
      bodies.push(b)
      if (b.async) return new Response(JSON.stringify({ error: 'unknown field "async"', code: 'invalid_request' }), { status: 400 })
      return new Response(JSON.stringify({ affected: 3, errors: 0, failed: [], duration_ms: 4 }), { status: 200 })
    }))
    const r = await sendBulk({ action: 'retry', filter: { queue: 'q' }, async: true })
    expect(r).toMatchObject({ affected: 3 })
    expect(bodies).toEqual([{ action: 'retry', filter: { queue: 'q' }, async: true }, { action: 'retry', filter: { queue: 'q' } }])
  })
})

describe('BulkDialog', () => {
  it('confirms with a preview, sends the request and reports the result', async () => {
    const sent: unknown[] = []
    vi.stubGlobal('fetch', vi.fn(async (u: string, init: RequestInit) => {
      sent.push([u, JSON.parse(init.body as string)])
      return new Response(JSON.stringify({ affected: 7, errors: 1, failed: [{ job_id: 'j9', code: 'conflict', error: 'job is pending' }], duration_ms: 12 }), { status: 200 })
    }))
    const done = vi.fn()
    const sample = ['j1', 'j2', 'j3', 'j4', 'j5', 'j6'].map((id) => row(id))
    render(<BulkDialog action="retry" target={{ filter: { state: ['dead'] }, count: 8, description: 'every job matching state dead', sample }} onClose={() => {}} onDone={done} />)
    expect(screen.getByRole('dialog').textContent).toContain('This will retry 8 jobs: every job matching state dead.')
    expect(screen.getByTestId('bulk-preview').querySelectorAll('tr').length).toBe(5)
    expect(screen.getByText('… and 3 more')).toBeTruthy()
    fireEvent.click(screen.getByTestId('bulk-confirm'))
    await waitFor(() => expect(screen.getByTestId('bulk-result').textContent).toContain('7 jobs affected'))
    expect(screen.getByTestId('bulk-result').textContent).toContain('1 could not be')
    expect(sent).toEqual([['/api/v1/jobs/bulk', { action: 'retry', filter: { state: ['dead'] }, confirm: true }]])
    expect(done).toHaveBeenCalledOnce()
  })

  it('asks for the target queue of a move before sending', async () => {
    const f = vi.fn()
    vi.stubGlobal('fetch', f)
    render(<BulkDialog action="move" target={{ ids: ['j1'], count: 1, description: 'the 1 selected', sample: [row('j1')] }} onClose={() => {}} onDone={() => {}} />)
    fireEvent.submit(screen.getByTestId('bulk-confirm').closest('form')!)
    await waitFor(() => expect(screen.getByRole('alert').textContent).toContain('Name the target queue'))
    expect(f).not.toHaveBeenCalled()
  })
})

const job = (over: Partial<Job>): Job => ({
  id: 'job_1_X', queue: 'q', payload: {}, state: 'active', priority: 'normal', attempt: 2, max_retries: 5, attempts_remaining: 3,
  retry_backoff: 'exponential', retry_base_delay: '5s', retry_max_delay: '10m', lease_duration: 60,
  created_at: '2026-02-11T10:00:00.000Z', scheduled_at: null, started_at: '2026-02-11T10:00:14.302Z', completed_at: null, failed_at: null,
  lease_expires_at: null, expire_after: null, expire_at: null, unique_key: null, unique_period: null, batch_id: null, chain_id: null,
  chain_step: null, chain_config: null, tags: {}, progress: null, checkpoint: null, result: null, cancel_requested: false, reason: null,
  last_error: 'SMTP timeout', errors: [{ attempt: 1, error: 'SMTP timeout', at: '2026-02-11T10:00:04.301Z' }], worker: { id: 'w2', hostname: 'h' },
  ...over,
})

describe('job timeline and attempts', () => {
  it('reconstructs a timeline from the job when the server sends none', () => {
    expect(timelineOf(job({})).map((e) => e.type)).toEqual(['enqueued', 'failed', 'started'])
  })
  it('prefers the server timeline', () => {
    const tl = [{ at: '2026-02-11T10:00:00.000Z', type: 'enqueued' }, { at: '2026-02-11T10:00:00.124Z', type: 'started', attempt: 1, worker_id: 'w1' }]
    expect(timelineOf(job({ timeline: tl }))).toBe(tl)
  })
  it('pairs attempts with their starts and outcomes', () => {
    const tl = [
      { at: '2026-02-11T10:00:00.000Z', type: 'enqueued' },
      { at: '2026-02-11T10:00:00.100Z', type: 'started', attempt: 1, worker_id: 'w1' },
      { at: '2026-02-11T10:00:04.301Z', type: 'failed', attempt: 1 },
      { at: '2026-02-11T10:00:14.302Z', type: 'started', attempt: 2, worker_id: 'w2' },
    ]
    const a = attemptsOf(job({ timeline: tl, state: 'completed', completed_at: '2026-02-11T10:00:15.302Z' }))
    expect(a).toEqual([
      { n: 1, started: '2026-02-11T10:00:00.100Z', duration: 4201, result: 'SMTP timeout' },
      { n: 2, started: '2026-02-11T10:00:14.302Z', duration: 1000, result: 'completed' },
    ])
  })
})

describe('BulkProgress', () => {
  it('follows a background operation until it is done, and can cancel it', async () => {
    const states = [
      { processed: 500, status: 'processing', finished_at: null },
      { processed: 1000, status: 'completed', finished_at: '2026-02-11T10:00:02.000Z' },
    ]
    const calls: string[] = []
    vi.stubGlobal('fetch', vi.fn(async (u: string, init: RequestInit) => {
      calls.push(`${init.method} ${u}`)
      if (init.method === 'DELETE') return new Response('{"status":"cancelling"}', { status: 200 })
      const st = states.length > 1 && calls.filter((c) => c.startsWith('GET')).length > 1 ? states.pop()! : states[0]
      return new Response(JSON.stringify({ id: 'bulk_1', action: 'retry', total: 1000, affected: st.processed, errors: 2, created_at: '2026-02-11T10:00:00.000Z', duration_ms: 2000, ...st }), { status: 200 })
    }))
    const finished = vi.fn()
    render(<BulkProgress id="bulk_1" onFinished={finished} />)
    await waitFor(() => expect(screen.getByTestId('progress-text').textContent).toBe('500 / 1,000 (50%)'))
    expect(screen.getByTestId('bulk-progress').textContent).toContain('Errors: 2')
    fireEvent.click(screen.getByRole('button', { name: 'Cancel operation' }))
    await waitFor(() => expect(calls).toContain('DELETE /api/v1/bulk/bulk_1'))
    await waitFor(() => expect(finished).toHaveBeenCalledOnce(), { timeout: 3000 })
    expect(screen.getByTestId('progress-text').textContent).toBe('1,000 / 1,000 (100%)')
  })
})

