// @vitest-environment jsdom
// What an operator on call reads (issue 19): attempts, held counts and
// dependencies, dead letters with when and why, per-row actions, partial
// searches, big payloads, workers on long leases, the Move dialog.
import { afterEach, beforeAll, describe, expect, it, vi } from 'vitest'
import { cleanup, fireEvent, render, screen, waitFor } from '@testing-library/preact'
import { attemptsAllowed, fmtAttempt, fmtAttemptShort, fmtBytes, rowPayload } from './format'
import { activeFilters, emptyForm, reasonText } from './search'
import { workerStatus } from './workers'
import { JobRowView, JobSearch } from './components/JobSearch'
import { Dependencies, MoveDialog } from './pages/JobDetail'
import { QueueTable } from './pages/Queues'
import type { Job, JobRow, Queue, Worker } from './api'

beforeAll(() => {
  HTMLDialogElement.prototype.showModal = function () { this.setAttribute('open', '') }
  HTMLDialogElement.prototype.close = function () { this.removeAttribute('open') }
})
afterEach(() => { cleanup(); vi.unstubAllGlobals() })

const row = (over: Partial<JobRow> = {}): JobRow => ({
  id: 'job_2_01JAAAAAAAAAAAAAAAAAAAAAAA', queue: 'webhooks', state: 'dead', priority: 'normal', payload: { hook: 1 }, attempt: 1, max_retries: 0,
  created_at: '2026-02-11T10:00:00Z', scheduled_at: null, started_at: '2026-02-11T10:00:01Z', completed_at: '2026-02-11T10:05:00Z',
  last_error: 'HTTP 502', error_count: 1, reason: 'max_retries', tags: {}, batch_id: null, unique_key: null, worker_id: null, progress: null,
  ...over,
})

function json(body: unknown, status = 200) {
  return new Response(JSON.stringify(body), { status, headers: { 'Content-Type': 'application/json' } })
}

describe('attempts', () => {
  it('max_retries counts attempts, and 0 still runs once: never "of 0"', () => {
    expect(attemptsAllowed(0)).toBe(1)
    expect(fmtAttempt(1, 0)).toBe('attempt 1 of 1 (no retries)')
    expect(fmtAttemptShort(1, 0)).toBe('1 of 1')
    expect(fmtAttempt(2, 5)).toBe('attempt 2 of 5')
    expect(fmtAttempt(0, 3)).toBe('not run yet (up to 3 attempts)')
    expect(fmtAttempt(0, 0)).toBe('not run yet (1 attempt, no retries)')
    expect(fmtAttemptShort(4, 3)).toBe('4 of 4') // requeued past its limit
  })
})

describe('payloads left out of a search page', () => {
  it('say their size instead of null', () => {
    expect(fmtBytes(950)).toBe('950 B')
    expect(fmtBytes(9216)).toBe('9.0 KiB')
    expect(rowPayload({ payload: null, payload_omitted: true, payload_bytes: 20_480 })).toBe('payload of 20.0 KiB — open the job')
    expect(rowPayload({ payload: null })).toBe('null')
  })
})

describe('search form', () => {
  it('counts the filters beyond the page’s own', () => {
    const f = emptyForm()
    expect(activeFilters(f)).toBe(0)
    expect(activeFilters({ ...f, queue: 'q', states: ['dead'] }, { queue: true, states: true })).toBe(0)
    expect(activeFilters({ ...f, jq: '.a' })).toBe(1)
    expect(activeFilters({ ...f, sort: 'completed_at' }, { sort: 'completed_at' })).toBe(0)
    expect(activeFilters({ ...f, sort: 'created_at' }, { sort: 'completed_at' })).toBe(1)
  })
  it('reasons in words', () => {
    expect(reasonText('max_retries')).toBe('out of attempts')
    expect(reasonText('dependency job_1_X dead')).toBe('dependency job_1_X dead')
    expect(reasonText(null)).toBe('')
  })
})

describe('workers', () => {
  const w = (last: string, active: number): Worker => ({ id: 'w', hostname: 'h', queues: [], active_jobs: active, jobs: [], first_seen: last, last_seen: last })
  const now = Date.parse('2026-02-11T10:10:00Z')
  it('a worker on a long lease is connected; one quiet and idle is gone', () => {
    expect(workerStatus(w('2026-02-11T10:09:30Z', 0), now)).toBe('connected')
    expect(workerStatus(w('2026-02-11T10:00:00Z', 2), now)).toBe('busy')
    expect(workerStatus(w('2026-02-11T10:00:00Z', 0), now)).toBe('gone')
  })
})

describe('dead-letter rows', () => {
  it('one line: attempts, reason, when it died, and its own Retry and Delete', async () => {
    const acted: string[] = []
    const onDelete = vi.fn()
    render(<table><tbody><JobRowView j={row()} dead showQueue checked={false} onToggle={() => {}} onAct={(l) => acted.push(l)} onDelete={onDelete} /></tbody></table>)
    expect(screen.getByTestId('attempts').textContent).toBe('1 of 1')
    expect(screen.getByTestId('reason').textContent).toBe('out of attempts: HTTP 502')
    expect(screen.getByTestId('died').getAttribute('title')).toBe('2026-02-11 10:05:00 UTC')
    fireEvent.click(screen.getByRole('button', { name: 'Retry job_2_01JAAAAAAAAAAAAAAAAAAAAAAA' }))
    expect(acted).toEqual(['Retried job_2_…AAAAAAAA'])
    fireEvent.click(screen.getByRole('button', { name: 'Delete job_2_01JAAAAAAAAAAAAAAAAAAAAAAA' }))
    expect(onDelete).toHaveBeenCalledOnce()
    expect(screen.queryByRole('button', { name: /^Cancel / })).toBeNull()
  })
  it('a waiting job offers Cancel, not Retry; a big payload links to its job', () => {
    render(<table><tbody><JobRowView j={row({ state: 'pending', payload: null, payload_omitted: true, payload_bytes: 10_240 })} dead={false} showQueue checked={false} onToggle={() => {}} onAct={() => {}} onDelete={() => {}} /></tbody></table>)
    expect(screen.getByRole('button', { name: /^Cancel / })).toBeTruthy()
    expect(screen.queryByRole('button', { name: /^Retry / })).toBeNull()
    expect(screen.getByTestId('payload-omitted').textContent).toBe('payload of 10.0 KiB — open the job')
  })
})

describe('JobSearch', () => {
  const page = (over: Record<string, unknown> = {}) => ({ jobs: [row()], total: 50, cursor: 'c1', has_more: true, duration_ms: 1000, ...over })
  it('says a partial answer is partial: total is a lower bound, Next continues', async () => {
    const bodies: unknown[] = []
    vi.stubGlobal('fetch', vi.fn(async (_u: string, init: RequestInit) => { bodies.push(JSON.parse(init.body as string)); return json(page({ partial: true })) }))
    render(<JobSearch basePath="/dead" query={new URLSearchParams()} fixedStates={['dead']} collapsible defaultSort="completed_at" />)
    await waitFor(() => expect(screen.getByTestId('result-count').textContent).toContain('≥ 50 results'))
    expect(screen.getByTestId('partial-note').textContent).toContain('more jobs may match')
    expect(screen.getByText(/^page 1$/)).toBeTruthy()
    expect(bodies[0]).toMatchObject({ state: ['dead'], sort: 'completed_at' })
  })
  it('folds its form while no filter is set, and opens it on demand or with one', async () => {
    vi.stubGlobal('fetch', vi.fn(async () => json(page({ has_more: false }))))
    const { unmount } = render(<JobSearch basePath="/queues/q" query={new URLSearchParams()} fixedQueue="q" collapsible />)
    await waitFor(() => expect(screen.getByTestId('result-count').textContent).toContain('50 results'))
    expect(screen.queryByLabelText('jq filter')).toBeNull()
    expect(screen.getByLabelText('Payload contains')).toBeTruthy()
    fireEvent.click(screen.getByTestId('show-filters'))
    expect(screen.getByLabelText('jq filter')).toBeTruthy()
    unmount()
    render(<JobSearch basePath="/queues/q" query={new URLSearchParams('jq=.a')} fixedQueue="q" collapsible />)
    expect((screen.getByLabelText('jq filter') as HTMLInputElement).value).toBe('.a')
  })
})

describe('held jobs', () => {
  it('the queue tables count them, linked to the held view', () => {
    const q: Queue = { name: 'publish', pending: 0, active: 0, scheduled: 0, retrying: 0, completed: 0, dead: 0, cancelled: 0, held: 3, paused: false, max_concurrency: null, throttle: null, throughput: null }
    render(<QueueTable queues={[q]} />)
    const cell = screen.getByTestId('q-held')
    expect(cell.textContent).toBe('3')
    expect(cell.querySelector('a')!.getAttribute('href')).toBe('/ui/held?queue=publish')
  })
  it('a held job names and links what it waits for, with their states', async () => {
    vi.stubGlobal('fetch', vi.fn(async (u: string) => (u.endsWith('job_1_A') ? json({ state: 'completed' }) : json({ error: 'job not found', code: 'not_found' }, 404))))
    render(<Dependencies ids={['job_1_A', 'job_3_B']} done={1} />)
    const deps = screen.getByTestId('dependencies')
    expect(deps.textContent).toContain('1 of 2 completed')
    const links = [...deps.querySelectorAll('a')].map((a) => a.getAttribute('href'))
    expect(links).toEqual(['/ui/jobs/job_1_A', '/ui/jobs/job_3_B'])
    await waitFor(() => expect(deps.textContent).toContain('completed'))
    await waitFor(() => expect(deps.textContent).toContain('deleted'))
  })
})

describe('Move dialog', () => {
  const job = { id: 'job_1_X', queue: 'emails', priority: 'critical' } as Job
  it('sets the chosen priority unless "Keep current priority" is ticked', async () => {
    const sent: unknown[] = []
    vi.stubGlobal('fetch', vi.fn(async (_u: string, init: RequestInit) => {
      if (init.method === 'GET') return json({ queues: [] })
      sent.push(JSON.parse(init.body as string))
      return json({ job_id: 'job_1_X', queue: 'legacy', status: 'pending' })
    }))
    const { unmount } = render(<MoveDialog job={job} onClose={() => {}} />)
    fireEvent.input(screen.getByLabelText('Target queue'), { target: { value: 'legacy' } })
    expect((screen.getByLabelText('Keep current priority (critical)') as HTMLInputElement).checked).toBe(false)
    fireEvent.change(screen.getByLabelText('New priority'), { target: { value: 'high' } })
    fireEvent.click(screen.getByRole('button', { name: 'Move' }))
    await waitFor(() => expect(sent).toHaveLength(1))
    expect(sent[0]).toEqual({ queue: 'legacy', reset_attempt: true, priority: 'high' })
    unmount()
    render(<MoveDialog job={job} onClose={() => {}} />)
    fireEvent.input(screen.getByLabelText('Target queue'), { target: { value: 'legacy' } })
    fireEvent.click(screen.getByLabelText('Keep current priority (critical)'))
    expect(screen.queryByLabelText('New priority')).toBeNull()
    fireEvent.click(screen.getByRole('button', { name: 'Move' }))
    await waitFor(() => expect(sent).toHaveLength(2))
    expect(sent[1]).toEqual({ queue: 'legacy', reset_attempt: true })
  })
})
