// @vitest-environment jsdom
import { afterEach, describe, expect, it, vi } from 'vitest'
import { cleanup, fireEvent, render, screen, waitFor } from '@testing-library/preact'
import {
  appendAuditPage, auditFormFromQuery, auditParams, auditProblem, auditQueryFromForm, emptyAuditForm, emptyAuditList, statusTone, whoLabel,
} from './audit'
import { AuditPage } from './pages/Audit'
import type { AuditRecord, WhoAmI } from './api'

afterEach(() => { cleanup(); vi.unstubAllGlobals(); window.history.replaceState(null, '', '/') })

const rec = (id: string, over: Partial<AuditRecord> = {}): AuditRecord => ({
  id, at: '2026-02-11T10:00:00Z', key_id: '3f2a1b0c9d8e7f60', key_name: 'ops', role: 'operator', namespace: 'default',
  method: 'POST', path: '/api/v1/queues/emails/pause', status: 200, summary: 'pause queue emails', remote: '127.0.0.1:5000', ...over,
})
const admin: WhoAmI = { auth: 'open', key_id: '', name: 'anonymous', namespace: 'default', role: 'admin', queues: [], permissions: ['audit:read', 'jobs:read'] }
const operator: WhoAmI = { auth: 'keys', key_id: 'k1', name: 'ops', namespace: 'billing', role: 'operator', queues: [], permissions: ['audit:read'] }

describe('audit filters in the URL and the API', () => {
  it('round-trips the filters through the query string, leaving empty ones out', () => {
    const f = { namespace: 'billing', key_id: '3f2a', method: 'delete', path_prefix: '/api/v1/queues/', status: '403', since: '2026-02-10T09:30', until: '2026-02-11' }
    const q = auditQueryFromForm(f, true)
    expect(q.get('method')).toBe('DELETE')
    expect(auditFormFromQuery(new URLSearchParams(q.toString()))).toEqual({ ...f, method: 'DELETE' })
    expect(auditQueryFromForm(emptyAuditForm(), true).toString()).toBe('')
    // A key that is not an admin's reads its own namespace: no filter.
    expect(auditQueryFromForm(f, false).has('namespace')).toBe(false)
  })

  it('builds the API query: RFC 3339 times, a page size, the cursor', () => {
    const f = { ...emptyAuditForm(), namespace: 'billing', method: 'post', status: ' 403 ', since: '2026-02-10T10:00:00+02:00', until: '2026-02-11T00:00:00Z' }
    expect(Object.fromEntries(auditParams(f, true, 'c1~x', 20))).toEqual({
      namespace: 'billing', method: 'POST', status: '403', since: '2026-02-10T08:00:00.000Z', until: '2026-02-11T00:00:00.000Z', limit: '20', cursor: 'c1~x',
    })
    expect(auditParams(f, false).has('namespace')).toBe(false)
    expect(auditParams(emptyAuditForm(), true).toString()).toBe('limit=50')
  })

  it('says what the server would refuse before asking it', () => {
    expect(auditProblem(emptyAuditForm())).toBeUndefined()
    expect(auditProblem({ ...emptyAuditForm(), status: '4xx' })).toContain('HTTP status')
    expect(auditProblem({ ...emptyAuditForm(), status: '600' })).toContain('HTTP status')
    expect(auditProblem({ ...emptyAuditForm(), status: '99' })).toContain('HTTP status')
    expect(auditProblem({ ...emptyAuditForm(), status: '404' })).toBeUndefined()
    expect(auditProblem({ ...emptyAuditForm(), since: 'yesterday' })).toContain('Since')
    expect(auditProblem({ ...emptyAuditForm(), since: '2026-02-11', until: '2026-02-10' })).toContain('before')
  })

  it('appends pages without showing a record twice, and stops at the last page', () => {
    let l = appendAuditPage(emptyAuditList, { records: [rec('3'), rec('2')], has_more: true, cursor: 'c2' })
    expect(l).toEqual({ records: [rec('3'), rec('2')], hasMore: true, cursor: 'c2' })
    l = appendAuditPage(l, { records: [rec('2'), rec('1')], has_more: false, cursor: null })
    expect(l.records.map((r) => r.id)).toEqual(['3', '2', '1'])
    expect(l.hasMore).toBe(false)
    expect(l.cursor).toBeNull()
  })

  it('tones statuses and names who called', () => {
    expect([200, 399, 400, 403, 499, 500, 503].map(statusTone)).toEqual(['ok', 'ok', 'refused', 'refused', 'refused', 'failed', 'failed'])
    expect(whoLabel(rec('1'))).toBe('ops')
    expect(whoLabel(rec('1', { key_name: '', role: '', key_id: '' }))).toBe('unidentified')
    expect(whoLabel(rec('1', { key_name: '', role: '', key_id: 'abcd' }))).toBe('unidentified (key abcd)')
  })
})

describe('the audit page', () => {
  const ok = (body: unknown) => new Response(JSON.stringify(body), { status: 200 })

  it('loads the newest records, loads more with the cursor, refreshes, and filters through the URL', async () => {
    const calls: string[] = []
    let refreshed = false
    vi.stubGlobal('fetch', vi.fn(async (u: string) => {
      calls.push(u)
      const q = new URL(u, 'http://x').searchParams
      if (q.get('method') === 'DELETE') return ok({ records: [rec('d1', { method: 'DELETE', path: '/api/v1/auth/keys/k9', status: 500, summary: 'revoke a key' })], has_more: false, cursor: null })
      if (q.get('cursor') === 'c2') return ok({ records: [rec('r1', { status: 403, summary: 'pause queue x (forbidden)' })], has_more: false, cursor: null })
      const first = refreshed ? [rec('r4', { summary: 'resume queue emails' }), rec('r3')] : [rec('r3'), rec('r2')]
      return ok({ records: first, has_more: true, cursor: 'c2' })
    }))
    render(<AuditPage query={new URLSearchParams()} who={admin} />)
    await waitFor(() => expect(screen.getByTestId('audit-count').textContent).toBe('2 records shown, more to load'))
    expect(calls).toEqual(['/api/v1/audit?limit=50'])
    const rows = () => [...document.querySelectorAll('tr[data-audit]')].map((r) => r.getAttribute('data-audit'))
    expect(rows()).toEqual(['r3', 'r2'])
    expect(screen.getAllByText('pause queue emails')).toHaveLength(2)
    expect(screen.getByRole('columnheader', { name: 'Namespace' })).toBeTruthy()

    fireEvent.click(screen.getByRole('button', { name: 'Load more' }))
    await waitFor(() => expect(rows()).toEqual(['r3', 'r2', 'r1']))
    expect(calls[1]).toBe('/api/v1/audit?limit=50&cursor=c2')
    expect(screen.queryByRole('button', { name: 'Load more' })).toBeNull()
    expect(screen.getByText('403').className).toContain('st-refused')
    expect(screen.getByTestId('audit-count').textContent).toBe('3 records')

    // Refresh: the first page again, replacing what was shown.
    refreshed = true
    fireEvent.click(screen.getByRole('button', { name: 'Refresh' }))
    await waitFor(() => expect(rows()).toEqual(['r4', 'r3']))

    // Filtering puts the filters in the URL (the app then renders the
    // page with that query).
    fireEvent.change(screen.getByLabelText('Method'), { target: { value: 'DELETE' } })
    fireEvent.click(screen.getByRole('button', { name: 'Filter' }))
    expect(window.location.pathname + window.location.search).toBe('/ui/audit?method=DELETE')
    cleanup()
    render(<AuditPage query={new URLSearchParams('method=DELETE')} who={admin} />)
    await waitFor(() => expect(rows()).toEqual(['d1']))
    expect(calls[calls.length - 1]).toBe('/api/v1/audit?method=DELETE&limit=50')
    expect(screen.getByText('500').className).toContain('st-failed')
  })

  it('shows the empty state, a filter the server would refuse, and a server error', async () => {
    const calls: string[] = []
    let fail = false
    vi.stubGlobal('fetch', vi.fn(async (u: string) => {
      calls.push(u)
      if (fail) return new Response(JSON.stringify({ error: 'no leader for shard 2', code: 'unavailable' }), { status: 503 })
      return ok({ records: [], has_more: false, cursor: null })
    }))
    render(<AuditPage query={new URLSearchParams('status=204')} who={operator} />)
    await waitFor(() => expect(screen.getByText('No audited call matches these filters.')).toBeTruthy())
    expect(calls).toEqual(['/api/v1/audit?status=204&limit=50'])
    // An operator reads its own namespace: no namespace filter or column.
    expect(screen.queryByLabelText('Namespace')).toBeNull()
    expect(screen.getByText('billing')).toBeTruthy()
    cleanup()

    render(<AuditPage query={new URLSearchParams('status=4xx')} who={operator} />)
    await waitFor(() => expect(screen.getByRole('alert').textContent).toContain('Status must be an HTTP status'))
    expect(calls).toHaveLength(1) // never sent
    cleanup()

    fail = true
    render(<AuditPage query={new URLSearchParams()} who={operator} />)
    await waitFor(() => expect(screen.getByRole('alert').textContent).toBe('no leader for shard 2'))
    expect(document.querySelector('table')).toBeNull()
  })

  it('a key without audit:read is told so and asks nothing', async () => {
    const f = vi.fn()
    vi.stubGlobal('fetch', f)
    render(<AuditPage query={new URLSearchParams()} who={{ ...operator, role: 'readonly', permissions: ['jobs:read'] }} />)
    expect(screen.getByText(/may not read the audit log/).textContent).toContain('role readonly')
    expect(f).not.toHaveBeenCalled()
  })
})
