// Who the UI acts as. The server keeps the API key in an HttpOnly,
// SameSite=Strict cookie (POST /api/v1/auth/session), which every call and
// the event stream carry; the page itself never sees or stores the key
// after the login form sends it.
import { useEffect, useState } from 'preact/hooks'
import { api, ApiError, chosenNamespace, clearNamespace, setUnauthorizedHandler, type WhoAmI } from './api'

export type AuthState =
  | { state: 'checking' }
  | { state: 'login'; message?: string }
  | { state: 'in'; who: WhoAmI }

let current: AuthState = { state: 'checking' }
const listeners = new Set<(s: AuthState) => void>()

function set(s: AuthState) {
  current = s
  listeners.forEach((l) => l(s))
}

export function authState(): AuthState { return current }

// Any call answered 401: the key is missing, revoked, disabled or expired.
setUnauthorizedHandler((message) => {
  if (current.state !== 'login') set({ state: 'login', message: current.state === 'in' ? message : undefined })
})

// checkAuth asks the server who we are (open servers answer for anyone).
// A namespace chosen earlier that the server refuses now (deleted: 404;
// no longer granted: 403) is dropped, and the session's own one used.
export async function checkAuth(): Promise<void> {
  try {
    let who: WhoAmI
    try {
      who = await api.whoami()
    } catch (e) {
      if (!(e instanceof ApiError && (e.status === 404 || e.status === 403) && chosenNamespace())) throw e
      clearNamespace()
      who = await api.whoami()
    }
    set({ state: 'in', who })
  } catch (e) {
    // 401 already switched to the login; other errors (the server is
    // down) leave the app to show them on its pages.
    if (!(e instanceof ApiError && e.status === 401)) set({ state: 'in', who: unknownWho })
  }
}

const unknownWho: WhoAmI = { auth: 'open', key_id: '', name: '', namespace: '', role: '', queues: [], permissions: [] }

// login sends the key once; the server answers with the cookie and who the
// key is. A refused key throws (the form shows why).
// A namespace chosen by whoever used this browser before is dropped.
export async function login(key: string): Promise<void> {
  clearNamespace()
  set({ state: 'in', who: await api.login(key.trim()) })
}

export async function logout(): Promise<void> {
  await api.logout()
  set({ state: 'login' })
  // An open server lets anyone in without a key: ask again.
  await checkAuth()
}

export function useAuth(): AuthState {
  const [s, setS] = useState(current)
  useEffect(() => {
    listeners.add(setS)
    setS(current)
    return () => { listeners.delete(setS) }
  }, [])
  return s
}
