// Single sign-on in the browser: a corvo server configured for the test's
// own OpenID Connect issuer (bin/oidc-issuer, built by make ui-e2e from
// internal/oidctest), whose one user is in the groups "ops" (mapped to
// operator in the default namespace) and "nobody-maps-this". The login
// offers "Sign in with SSO"; after the round trip through the issuer the
// console shows the user, their role and their one namespace (no picker);
// logging out brings the login back.
//
// Namespaces other than default cannot be made through the API yet, so the
// mapped namespace is default.
import { test, expect } from '@playwright/test'
import { spawn, type ChildProcess } from 'node:child_process'
import { existsSync } from 'node:fs'
import { resolve } from 'node:path'
import { createInterface } from 'node:readline'
import { startServer, type StartedServer } from './global-setup'

const ADMIN = 'corvo_00000000000e2e01_e2e-test-admin-key-0123456789abcdefABCDEF_y'
const SECRET = 'e2e-oidc-client-secret'

let issuer: ChildProcess
let srv: StartedServer

// startIssuer runs bin/oidc-issuer and reads its URL from its first line.
async function startIssuer(): Promise<string> {
  const bin = resolve(process.env.CORVO_OIDC_ISSUER_BIN ?? '../bin/oidc-issuer')
  if (!existsSync(bin)) throw new Error(`${bin} is missing: make ui-e2e builds it`)
  issuer = spawn(bin, ['--client-id', 'corvo-ui', '--client-secret', SECRET, '--sub', 'e2e-user',
    '--email', 'sso-user@example.test', '--groups', 'ops,nobody-maps-this'], { stdio: ['ignore', 'pipe', 'inherit'] })
  const lines = createInterface({ input: issuer.stdout! })
  return await new Promise<string>((ok, fail) => {
    lines.once('line', ok)
    issuer.once('exit', (code) => fail(new Error(`oidc-issuer exited with ${code}`)))
  })
}

test.beforeAll(async () => {
  const url = await startIssuer()
  srv = await startServer(['--auth', 'on', '--oidc-issuer', url, '--oidc-client-id', 'corvo-ui',
    '--oidc-redirect-url', '{url}/auth/oidc/callback', '--oidc-role-map', 'ops=default:operator'],
  { CORVO_ADMIN_KEY: ADMIN, CORVO_OIDC_CLIENT_SECRET: SECRET })
  const r = await fetch(srv.url + '/api/v1/enqueue/batch', {
    method: 'POST', headers: { Authorization: `Bearer ${ADMIN}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ jobs: [{ queue: 'sso.mapped', payload: {} }, { queue: 'sso.mapped', payload: {} }, { queue: 'sso.mapped', payload: {} }] }),
  })
  if (!r.ok) throw new Error(`seeding: HTTP ${r.status} ${await r.text()}`)
})

test.afterAll(async () => {
  await srv?.stop()
  if (issuer && issuer.exitCode === null) {
    issuer.kill('SIGTERM')
    await new Promise<void>((r) => issuer.once('exit', () => r()))
  }
})

test('sign in with SSO, see the mapped namespace, log out', async ({ page }) => {
  await page.goto(srv.url + '/ui/')
  const sso = page.getByRole('link', { name: 'Sign in with SSO' })
  await expect(sso).toBeVisible()
  await expect(page.getByLabel('API key')).toBeVisible() // keys still work

  await sso.click()
  // Through the issuer and back: the console, as the issuer's user.
  await expect(page).toHaveURL(srv.url + '/ui/')
  await expect(page.getByTestId('who')).toContainText('sso-user@example.test')
  await expect(page.getByTestId('who').locator('.role')).toHaveText('operator')
  await expect(page.getByTestId('who-namespace')).toHaveText('default')
  await expect(page.getByTestId('ns-picker')).toHaveCount(0) // one namespace: nothing to pick
  await expect(page.getByTestId('stat-pending')).toHaveText('3')
  const cookie = (await page.context().cookies()).find((c) => c.name === 'corvo_session')
  expect(cookie?.httpOnly).toBe(true)
  expect(cookie?.sameSite).toBe('Strict')
  expect(cookie?.value.startsWith('v2.')).toBe(true)

  await page.goto(srv.url + '/ui/queues')
  await expect(page.getByRole('link', { name: 'sso.mapped' })).toBeVisible()

  // Log out: the login again, and a reload stays there.
  await page.getByRole('button', { name: 'Log out' }).click()
  await expect(page.getByRole('link', { name: 'Sign in with SSO' })).toBeVisible()
  expect((await page.context().cookies()).find((c) => c.name === 'corvo_session')).toBeUndefined()
  await page.reload()
  await expect(page.getByRole('link', { name: 'Sign in with SSO' })).toBeVisible()
})
