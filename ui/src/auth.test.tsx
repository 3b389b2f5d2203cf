// @vitest-environment jsdom
import { afterEach, describe, expect, it, vi } from 'vitest'
import { cleanup, fireEvent, render, screen, waitFor } from '@testing-library/preact'
import { api } from './api'
import { authState, checkAuth, logout } from './auth'
import { Login } from './pages/Login'

afterEach(() => { cleanup(); vi.unstubAllGlobals() })

const GOOD = 'corvo_0123456789abcdef_uiuiuiuiuiuiuiuiuiuiuiuiuiuiuiuiuiuiuiuiuiu'
const who = { auth: 'keys', key_id: '0123456789abcdef', name: 'ops', namespace: 'default', role: 'operator', queues: [], permissions: [] }
const unauthorized = (msg = 'this server needs an API key') =>
  new Response(JSON.stringify({ error: msg, code: 'unauthorized' }), { status: 401 })

describe('auth', () => {
  it('shows the login on a 401, refuses a wrong key, logs in with the right one, and out', async () => {
    let session = false
    const calls: string[] = []
    vi.stubGlobal('fetch', vi.fn(async (u: string, init: RequestInit) => {
      calls.push(`${init.method} ${u}${init.body ? ' ' + init.body : ''}`)
      if (u === '/api/v1/auth/session' && init.method === 'POST') {
        if (JSON.parse(init.body as string).key !== GOOD) return unauthorized('the API key is unknown')
        session = true
        return new Response(JSON.stringify(who), { status: 200 })
      }
      if (u === '/api/v1/auth/session' && init.method === 'DELETE') {
        session = false
        return new Response('{"logged_out":true}', { status: 200 })
      }
      if (!session) return unauthorized()
      return new Response(JSON.stringify(u.endsWith('/whoami') ? who : { queues: [] }), { status: 200 })
    }))

    await checkAuth()
    expect(authState()).toEqual({ state: 'login', message: undefined })

    render(<Login />)
    const input = screen.getByLabelText('API key') as HTMLInputElement
    expect(input.type).toBe('password')
    fireEvent.input(input, { target: { value: 'corvo_0000000000000000_nope' } })
    fireEvent.click(screen.getByRole('button', { name: 'Log in' }))
    await waitFor(() => expect(screen.getByTestId('login-error').textContent).toContain('That key was refused'))
    expect(authState().state).toBe('login')

    fireEvent.input(input, { target: { value: ` ${GOOD} ` } })
    fireEvent.click(screen.getByRole('button', { name: 'Log in' }))
    await waitFor(() => expect(authState()).toEqual({ state: 'in', who }))
    expect(calls).toContain(`POST /api/v1/auth/session {"key":"${GOOD}"}`)
    // The key lives in the server's HttpOnly cookie, nowhere in the page.
    expect(JSON.stringify({ ...localStorage })).not.toContain(GOOD)
    expect(JSON.stringify({ ...sessionStorage })).not.toContain(GOOD)
    expect(document.cookie).not.toContain(GOOD)

    // The session ends (revoked, expired): the next call's 401 brings the
    // login back, saying why.
    session = false
    await expect(api.queues()).rejects.toMatchObject({ status: 401 })
    expect(authState()).toEqual({ state: 'login', message: 'this server needs an API key' })

    session = true
    await checkAuth()
    expect(authState().state).toBe('in')
    await logout()
    expect(calls).toContain('DELETE /api/v1/auth/session')
    expect(authState().state).toBe('login')
  })

  it('an open server needs no login', async () => {
    vi.stubGlobal('fetch', vi.fn(async () => new Response(JSON.stringify({ ...who, auth: 'open', key_id: '', name: 'anonymous', role: 'admin' }), { status: 200 })))
    await checkAuth()
    expect(authState()).toMatchObject({ state: 'in', who: { auth: 'open', key_id: '' } })
  })
})

describe('single sign-on', () => {
  it('offers "Sign in with SSO" only when the server has it', async () => {
    vi.stubGlobal('fetch', vi.fn(async (u: string) => u === '/api/v1/auth/methods'
      ? new Response('{"api_key":true,"sso":{"enabled":true,"login_url":"/auth/oidc/login"}}', { status: 200 })
      : unauthorized()))
    render(<Login />)
    const link = await screen.findByTestId('sso-login')
    expect(link.textContent).toBe('Sign in with SSO')
    expect(link.getAttribute('href')).toBe('/auth/oidc/login')
    expect(screen.getByLabelText('API key')).toBeTruthy() // keys still work
    cleanup()

    vi.stubGlobal('fetch', vi.fn(async (u: string) => u === '/api/v1/auth/methods'
      ? new Response('{"api_key":true,"sso":{"enabled":false}}', { status: 200 })
      : unauthorized()))
    render(<Login />)
    await screen.findByText('This server needs an API key.')
    await new Promise((r) => setTimeout(r, 0))
    expect(screen.queryByTestId('sso-login')).toBeNull()
  })
})
