// Single sign-on in the browser: a corvo server configured for the test's
// own OpenID Connect issuer (bin/oidc-issuer, built by make ui-e2e from
// internal/oidctest), whose one user is in the groups "ops" (mapped to
// operator in namespace acme), "viewers" (readonly in beta) and
// "nobody-maps-this". The same queue name has a different number of jobs
// in acme, beta and default. The login offers "Sign in with SSO"; after the
// round trip through the issuer the console acts in acme (the first of the
// user's namespaces) and shows acme's jobs only; the namespace picker
// switches to beta, whose jobs only are shown then; default's are never
// seen; logging out brings the login back.
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
    '--email', 'sso-user@example.test', '--groups', 'ops,viewers,nobody-maps-this'], { stdio: ['ignore', 'pipe', 'inherit'] })
  const lines = createInterface({ input: issuer.stdout! })
  return await new Promise<string>((ok, fail) => {
    lines.once('line', ok)
    issuer.once('exit', (code) => fail(new Error(`oidc-issuer exited with ${code}`)))
  })
}

// asAdmin calls the API with the admin key, in namespace ns.
async function asAdmin(ns: string, method: string, path: string, body: unknown) {
  const r = await fetch(srv.url + path, {
    method, body: JSON.stringify(body),
    headers: { Authorization: `Bearer ${ADMIN}`, 'Content-Type': 'application/json', 'X-Corvo-Namespace': ns },
  })
  if (!r.ok) throw new Error(`${method} ${path} in ${ns}: HTTP ${r.status} ${await r.text()}`)
}

// Jobs of queue sso.mapped seeded in each namespace; default also has a
// queue of its own.
const SEEDED = { acme: 2, beta: 4, default: 3 }

test.beforeAll(async () => {
  const url = await startIssuer()
  srv = await startServer(['--auth', 'on', '--oidc-issuer', url, '--oidc-client-id', 'corvo-ui',
    '--oidc-redirect-url', '{url}/auth/oidc/callback', '--oidc-role-map', 'ops=acme:operator,viewers=beta:readonly'],
  { CORVO_ADMIN_KEY: ADMIN, CORVO_OIDC_CLIENT_SECRET: SECRET })
  for (const ns of ['acme', 'beta']) await asAdmin('default', 'POST', '/api/v1/namespaces', { name: ns, description: `e2e ${ns}` })
  for (const [ns, n] of Object.entries(SEEDED)) {
    await asAdmin(ns, 'POST', '/api/v1/enqueue/batch', { jobs: Array.from({ length: n }, (_, i) => ({ queue: 'sso.mapped', payload: { ns, i } })) })
  }
  await asAdmin('default', 'POST', '/api/v1/enqueue', { queue: 'sso.default-only', payload: {} })
})

test.afterAll(async () => {
  await srv?.stop()
  if (issuer && issuer.exitCode === null) {
    issuer.kill('SIGTERM')
    await new Promise<void>((r) => issuer.once('exit', () => r()))
  }
})

test('sign in with SSO, see the first namespace\'s jobs only, switch to the other, log out', async ({ page }) => {
  await page.goto(srv.url + '/ui/')
  const sso = page.getByRole('link', { name: 'Sign in with SSO' })
  await expect(sso).toBeVisible()
  await expect(page.getByLabel('API key')).toBeVisible() // keys still work

  await sso.click()
  // Through the issuer and back: the console, as the issuer's user, in
  // acme with its role there.
  await expect(page).toHaveURL(srv.url + '/ui/')
  const who = page.getByTestId('who')
  await expect(who).toContainText('sso-user@example.test')
  const picker = page.getByRole('combobox', { name: 'Namespace' })
  await expect(picker).toHaveValue('acme')
  await expect(picker.locator('option')).toHaveText(['acme', 'beta']) // its grants, not default
  await expect(who.locator('.role')).toHaveText('operator')
  await expect(page.getByTestId('stat-pending')).toHaveText(String(SEEDED.acme))
  const cookie = (await page.context().cookies()).find((c) => c.name === 'corvo_session')
  expect(cookie?.httpOnly).toBe(true)
  expect(cookie?.sameSite).toBe('Strict')
  expect(cookie?.value.startsWith('v2.')).toBe(true)

  await page.goto(srv.url + '/ui/queues')
  const row = page.locator('tr[data-queue="sso.mapped"]')
  await expect(row.locator('td').first()).toHaveText(String(SEEDED.acme))
  await expect(page.locator('tr[data-queue]')).toHaveCount(1) // default's own queue is not acme's

  // Switch to beta: the page reloads and shows beta's jobs, with the
  // role there.
  await picker.selectOption('beta')
  await expect(page.getByRole('combobox', { name: 'Namespace' })).toHaveValue('beta')
  await expect(who.locator('.role')).toHaveText('readonly')
  await expect(row.locator('td').first()).toHaveText(String(SEEDED.beta))
  await expect(page.locator('tr[data-queue]')).toHaveCount(1)
  await page.getByRole('link', { name: 'Dashboard' }).click()
  await expect(page.getByTestId('stat-pending')).toHaveText(String(SEEDED.beta))
  // The job search too.
  await page.getByRole('link', { name: 'Jobs', exact: true }).click()
  await expect(page.getByTestId('result-count')).toContainText(`${SEEDED.beta} results`)

  // Log out: the login again, the choice forgotten, and a reload stays there.
  await page.getByRole('button', { name: 'Log out' }).click()
  await expect(page.getByRole('link', { name: 'Sign in with SSO' })).toBeVisible()
  const cookies = await page.context().cookies()
  expect(cookies.find((c) => c.name === 'corvo_session')).toBeUndefined()
  expect(cookies.find((c) => c.name === 'corvo_namespace')).toBeUndefined()
  await page.reload()
  await expect(page.getByRole('link', { name: 'Sign in with SSO' })).toBeVisible()
})
