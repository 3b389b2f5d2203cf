// @vitest-environment jsdom
import { afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest'
import { cleanup, fireEvent, render, screen, waitFor } from '@testing-library/preact'
import { chosenNamespace, clearNamespace, setNamespace, type WhoAmI } from './api'
import { authState, checkAuth } from './auth'
import { listingAs, namespaceProblem, page, pickable } from './namespace'
import { NamespacePicker } from './components/NamespacePicker'
import { NamespacesPage } from './pages/Namespaces'

beforeAll(() => {
  // jsdom has <dialog> but not its modal methods.
  HTMLDialogElement.prototype.showModal = function () { this.setAttribute('open', '') }
  HTMLDialogElement.prototype.close = function () { this.removeAttribute('open') }
})
beforeEach(() => { clearNamespace() })
afterEach(() => { cleanup(); vi.unstubAllGlobals(); vi.restoreAllMocks() })

const ADMIN_PERMS = ['jobs:read', 'namespaces:manage']
const admin: WhoAmI = { auth: 'keys', key_id: 'k1', name: 'root', namespace: 'default', role: 'admin', queues: [], permissions: ADMIN_PERMS }
const operator: WhoAmI = { auth: 'keys', key_id: 'k2', name: 'ops', namespace: 'acme', role: 'operator', queues: [], permissions: ['jobs:read'] }

const json = (v: unknown, status = 200) => new Response(JSON.stringify(v), { status })
const ns = (name: string, keys = 0) => ({ name, description: name === 'acme' ? 'Acme Corp' : '', keys, created_at: name === 'default' ? null : '2026-03-01T10:00:00Z' })

type Call = { method: string; url: string; body?: string; headers: Record<string, string> }
function server(handle: (c: Call) => Response) {
  const calls: Call[] = []
  vi.stubGlobal('fetch', vi.fn(async (url: string, init: RequestInit) => {
    const c = { method: init.method ?? 'GET', url, body: init.body as string | undefined, headers: (init.headers ?? {}) as Record<string, string> }
    calls.push(c)
    return handle(c)
  }))
  return calls
}

describe('namespace names', () => {
  it('accepts what the server accepts and says why not otherwise', () => {
    for (const ok of ['a', 'acme', 'team-1', 'x_y', '0a', 'a'.repeat(63)]) expect(namespaceProblem(ok), ok).toBeNull()
    expect(namespaceProblem('')).toMatch(/needed/)
    expect(namespaceProblem('a'.repeat(64))).toMatch(/63/)
    expect(namespaceProblem('-a')).toMatch(/cannot start/)
    expect(namespaceProblem('_a')).toMatch(/cannot start/)
    for (const bad of ['Acme', 'a b', 'a.b', 'a/b', 'é']) expect(namespaceProblem(bad), bad).toMatch(/Only lowercase/)
  })
})

describe('the picker', () => {
  it('lists every namespace for an admin key, and switching sets the cookie and reloads', async () => {
    const calls = server((c) => c.url === '/api/v1/namespaces' ? json({ namespaces: [ns('default'), ns('acme', 2), ns('beta')] }) : json({}, 404))
    const reload = vi.spyOn(page, 'reload').mockImplementation(() => {})
    render(<NamespacePicker who={admin} />)
    const picker = await screen.findByTestId('ns-picker') as HTMLSelectElement
    expect([...picker.options].map((o) => o.value)).toEqual(['default', 'acme', 'beta'])
    expect(picker.value).toBe('default')
    expect(screen.getByRole('combobox', { name: 'Namespace' })).toBe(picker)
    expect(calls[0].headers['X-Corvo-Namespace']).toBeUndefined()

    fireEvent.change(picker, { target: { value: 'beta' } })
    expect(chosenNamespace()).toBe('beta')
    expect(reload).toHaveBeenCalledTimes(1)
  })

  it('shows a non-admin key its namespace, with no picker and no listing', async () => {
    const calls = server(() => json({}, 403))
    render(<NamespacePicker who={operator} />)
    expect(screen.getByTestId('who-namespace').textContent).toBe('acme')
    await new Promise((r) => setTimeout(r, 0))
    expect(screen.queryByTestId('ns-picker')).toBeNull()
    expect(calls).toEqual([])
  })

  it('an admin whose listing fails still sees its namespace', async () => {
    server(() => json({ error: 'this server has no key table', code: 'unavailable' }, 503))
    render(<NamespacePicker who={{ ...admin, namespace: 'acme' }} />)
    await new Promise((r) => setTimeout(r, 0))
    expect(screen.getByTestId('who-namespace').textContent).toBe('acme')
  })

  it('a single sign-on user picks among its grants, and lists every namespace from where it is admin', async () => {
    const sso: WhoAmI = { ...operator, sso: true, namespace: 'beta', role: 'readonly', permissions: ['jobs:read'], grants: { beta: 'readonly', ops: 'admin', acme: 'operator' } }
    expect(listingAs(sso)).toBe('ops')
    expect(listingAs({ ...sso, grants: { beta: 'readonly', acme: 'operator' } })).toBeNull()
    expect(listingAs(admin)).toBe('')
    expect(pickable({ ...sso, grants: { beta: 'readonly', acme: 'operator' } }, [])).toEqual(['acme', 'beta'])

    const calls = server((c) => c.url === '/api/v1/namespaces' ? json({ namespaces: [ns('default'), ns('acme'), ns('beta'), ns('ops'), ns('zeta')] }) : json({}, 404))
    render(<NamespacePicker who={sso} />)
    await waitFor(() => expect([...(screen.getByTestId('ns-picker') as HTMLSelectElement).options].map((o) => o.value)).toEqual(['default', 'acme', 'beta', 'ops', 'zeta']))
    expect(calls[0].headers['X-Corvo-Namespace']).toBe('ops')
  })
})

describe('a namespace chosen earlier that is gone', () => {
  it('is dropped, and whoami asked again in the session\'s own', async () => {
    setNamespace('gone')
    let asked = 0
    server(() => {
      asked++
      return chosenNamespace() === 'gone'
        ? json({ error: 'namespace "gone" does not exist', code: 'not_found' }, 404)
        : json(admin)
    })
    await checkAuth()
    expect(asked).toBe(2)
    expect(chosenNamespace()).toBe('')
    expect(authState()).toEqual({ state: 'in', who: admin })
  })
})

describe('the Namespaces page', () => {
  it('lists with key counts, validates a new name before asking, creates, and shows a refused delete', async () => {
    let list = [ns('default', 1), ns('acme', 2)]
    const calls = server((c) => {
      if (c.url === '/api/v1/namespaces' && c.method === 'GET') return json({ namespaces: list })
      if (c.url === '/api/v1/namespaces' && c.method === 'POST') {
        const b = JSON.parse(c.body!)
        list = [...list, ns(b.name)]
        return json(ns(b.name), 201)
      }
      if (c.url === '/api/v1/namespaces/acme' && c.method === 'DELETE') {
        return json({ error: 'namespace acme has 2 key(s) ([k7 k8]): revoke them first', code: 'conflict' }, 409)
      }
      if (c.url === '/api/v1/namespaces/new-team' && c.method === 'DELETE') {
        list = list.filter((n) => n.name !== 'new-team')
        return json({ name: 'new-team', deleted: true })
      }
      return json({ error: 'unexpected', code: 'x' }, 500)
    })
    render(<NamespacesPage who={admin} />)
    const row = (name: string) => document.querySelector(`tr[data-namespace="${name}"]`)
    await waitFor(() => expect(row('acme')).not.toBeNull())
    expect(row('acme')!.querySelector('[data-testid="ns-keys"]')!.textContent).toBe('2')
    expect(row('acme')!.textContent).toContain('Acme Corp')
    expect(row('default')!.textContent).toContain('current')
    expect(screen.queryByRole('button', { name: 'Delete namespace default' })).toBeNull() // default stays

    // A bad name is refused here, with no call.
    fireEvent.click(screen.getByRole('button', { name: '+ New namespace' }))
    const name = screen.getByLabelText('Name') as HTMLInputElement
    fireEvent.input(name, { target: { value: '-team' } })
    fireEvent.click(screen.getByRole('button', { name: 'Create' }))
    expect(screen.getByTestId('ns-create-error').textContent).toContain('cannot start with - or _')
    expect(calls.filter((c) => c.method === 'POST')).toEqual([])

    fireEvent.input(name, { target: { value: 'new-team' } })
    fireEvent.click(screen.getByRole('button', { name: 'Create' }))
    await waitFor(() => expect(row('new-team')).not.toBeNull())
    expect(calls.find((c) => c.method === 'POST')!.body).toBe('{"name":"new-team","description":""}')
    expect(screen.queryByLabelText('Name')).toBeNull() // the dialog closed

    // Deleting one in use: the server's reason, in the dialog.
    fireEvent.click(screen.getByRole('button', { name: 'Delete namespace acme' }))
    fireEvent.click(screen.getByRole('button', { name: 'Delete' }))
    await waitFor(() => expect(screen.getByTestId('ns-delete-error').textContent).toBe('namespace acme has 2 key(s) ([k7 k8]): revoke them first'))
    expect(row('acme')).not.toBeNull()
    fireEvent.click(screen.getByRole('button', { name: 'Cancel' }))

    // An empty one goes.
    fireEvent.click(screen.getByRole('button', { name: 'Delete namespace new-team' }))
    fireEvent.click(screen.getByRole('button', { name: 'Delete' }))
    await waitFor(() => expect(row('new-team')).toBeNull())
  })

  it('deleting the namespace the console acts in goes back to its own', async () => {
    setNamespace('temp')
    const reload = vi.spyOn(page, 'reload').mockImplementation(() => {})
    server((c) => c.method === 'GET' ? json({ namespaces: [ns('default'), ns('temp')] }) : json({ name: 'temp', deleted: true }))
    render(<NamespacesPage who={{ ...admin, namespace: 'temp' }} />)
    fireEvent.click(await screen.findByRole('button', { name: 'Delete namespace temp' }))
    fireEvent.click(screen.getByRole('button', { name: 'Delete' }))
    await waitFor(() => expect(reload).toHaveBeenCalledTimes(1))
    expect(chosenNamespace()).toBe('')
  })

  it('tells a key without namespaces:manage that it may not', () => {
    const calls = server(() => json({}, 403))
    render(<NamespacesPage who={operator} />)
    expect(screen.getByText(/may not manage namespaces/)).toBeTruthy()
    expect(calls).toEqual([])
  })
})
