// The login screen: shown when the server needs an API key and the UI has
// no (valid) session. The key goes to the server once, which keeps it in
// an HttpOnly cookie. A server with single sign-on also offers "Sign in
// with SSO" (a plain link: the server sends the browser to the identity
// provider, which sends it back signed in).
import { useEffect, useState } from 'preact/hooks'
import { ApiError, authMethods, type AuthMethods } from '../api'
import { login } from '../auth'

export function Login(props: { message?: string }) {
  const [key, setKey] = useState('')
  const [error, setError] = useState<string | undefined>(undefined)
  const [busy, setBusy] = useState(false)
  const [methods, setMethods] = useState<AuthMethods | undefined>(undefined)
  useEffect(() => { void authMethods().then(setMethods) }, [])
  const sso = methods?.sso.enabled ? methods.sso.login_url : undefined

  const submit = async (e: Event) => {
    e.preventDefault()
    if (!key.trim()) { setError('Enter an API key.'); return }
    setBusy(true)
    setError(undefined)
    try {
      await login(key)
    } catch (err) {
      setError(err instanceof ApiError && err.status === 401
        ? 'That key was refused: it is unknown, revoked, disabled or expired.'
        : `Could not log in: ${(err as Error).message}`)
      setBusy(false)
    }
  }

  return (
    <main class="login" id="main">
      <form class="login-card" onSubmit={submit} aria-labelledby="login-title">
        <h1 id="login-title"><span class="logo" aria-hidden="true">◆</span> Corvo</h1>
        {sso
          ? <p>Sign in with your organisation's account, or with an API key.</p>
          : <p>This server needs an API key.</p>}
        {props.message && <p class="muted" data-testid="login-reason">{props.message}</p>}
        {sso && <a class="btn primary sso" href={sso} data-testid="sso-login">Sign in with SSO</a>}
        <label for="api-key">API key</label>
        <input
          id="api-key" name="api-key" type="password" autocomplete="off" spellcheck={false}
          placeholder="corvo_…" value={key} onInput={(e) => setKey((e.target as HTMLInputElement).value)} autoFocus
        />
        {error && <p class="login-error" role="alert" data-testid="login-error">{error}</p>}
        <button class="btn primary" type="submit" disabled={busy}>{busy ? 'Logging in…' : 'Log in'}</button>
        <p class="muted small">
          Create keys with <code>corvo auth keys create</code>. A server that made its own admin key wrote it
          to <code>&lt;data-dir&gt;/admin-key</code>. The key is kept in a cookie this page cannot read.
        </p>
      </form>
    </main>
  )
}
