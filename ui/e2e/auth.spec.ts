// The UI against a server that needs API keys (--auth on, even on
// loopback): the login, a refused key, the dashboard once logged in, who is
// logged in, and log out.
import { test, expect } from '@playwright/test'
import { axeViolations } from './axe'
import { startServer, type StartedServer } from './global-setup'

const ADMIN = 'corvo_00000000000e2e00_e2e-test-admin-key-0123456789abcdefABCDEF_x'
const SHOTS = process.env.CORVO_SCREENSHOTS ?? 'screenshots'

let srv: StartedServer
let operatorKey = ''

async function asAdmin(method: string, path: string, body?: unknown) {
  const r = await fetch(srv.url + path, {
    method, body: body === undefined ? undefined : JSON.stringify(body),
    headers: { Authorization: `Bearer ${ADMIN}`, 'Content-Type': 'application/json' },
  })
  if (!r.ok) throw new Error(`${method} ${path}: HTTP ${r.status} ${await r.text()}`)
  return r.json()
}

test.beforeAll(async () => {
  srv = await startServer(['--auth', 'on'], { CORVO_ADMIN_KEY: ADMIN })
  operatorKey = (await asAdmin('POST', '/api/v1/auth/keys', { name: 'ui-operator', role: 'operator' })).key
  await asAdmin('POST', '/api/v1/enqueue/batch', { jobs: [{ queue: 'auth.q', payload: { n: 1 } }, { queue: 'auth.q', payload: { n: 2 } }] })
})

test.afterAll(async () => { await srv?.stop() })

test('a server that needs keys: login, a wrong key refused, the dashboard, log out', async ({ page, browser }) => {
  await page.addInitScript(() => {
    document.addEventListener('securitypolicyviolation', (e) => {
      const w = window as unknown as { __csp?: string[] }
      w.__csp = (w.__csp ?? []).concat(`${e.violatedDirective} ${e.blockedURI}`)
    })
  })
  const res = await page.goto(srv.url + '/ui/')
  expect(res?.headers()['content-security-policy']).toContain("script-src 'self' 'sha256-")
  const key = page.getByLabel('API key')
  await expect(key).toBeVisible()
  await expect(page.getByText('This server needs an API key.')).toBeVisible()
  await expect(page.getByTestId('stat-pending')).toHaveCount(0)
  // The login's screenshots: desktop and phone, light and dark.
  for (const [size, viewport] of [['desktop', { width: 1440, height: 900 }], ['phone', { width: 390, height: 844 }]] as const) {
    for (const theme of ['light', 'dark'] as const) {
      const ctx = await browser.newContext({ viewport, colorScheme: theme })
      const p = await ctx.newPage()
      await p.goto(srv.url + '/ui/')
      await p.getByLabel('API key').waitFor()
      await p.screenshot({ path: `${SHOTS}/login-${size}${theme === 'dark' ? '-dark' : ''}.png`, animations: 'disabled', caret: 'hide' })
      await ctx.close()
    }
  }

  // A wrong key: refused, with a message; still the login.
  await key.fill('corvo_0000000000000000_' + 'x'.repeat(43))
  await page.getByRole('button', { name: 'Log in' }).click()
  await expect(page.getByTestId('login-error')).toContainText('That key was refused')
  await expect(key).toBeVisible()

  // The right key: the dashboard, its data, who is logged in.
  await key.fill(operatorKey)
  await page.getByRole('button', { name: 'Log in' }).click()
  await expect(page.getByTestId('stat-pending')).toHaveText('2')
  await expect(page.getByTestId('who')).toContainText('ui-operator')
  await expect(page.getByTestId('who').locator('.role')).toHaveText('operator')
  // The key is in an HttpOnly cookie, nowhere the page can read it.
  const readable = await page.evaluate(() => JSON.stringify({ ...localStorage }) + JSON.stringify({ ...sessionStorage }) + document.cookie)
  expect(readable).not.toContain(operatorKey)
  const cookie = (await page.context().cookies()).find((c) => c.name === 'corvo_session')
  expect(cookie?.httpOnly).toBe(true)
  expect(cookie?.sameSite).toBe('Strict')
  // The live stream (over the cookie too) comes up.
  await expect(page.locator('.live')).toHaveText('Live')
  // A reload keeps the session.
  await page.reload()
  await expect(page.getByTestId('who')).toContainText('ui-operator')
  await expect(page.getByTestId('stat-pending')).toHaveText('2')

  // Log out: back to the login, and a reload stays there.
  await page.getByRole('button', { name: 'Log out' }).click()
  await expect(key).toBeVisible()
  expect((await page.context().cookies()).find((c) => c.name === 'corvo_session')).toBeUndefined()
  await page.reload()
  await expect(page.getByLabel('API key')).toBeVisible()
  expect(await page.evaluate(() => (window as unknown as { __csp?: string[] }).__csp ?? [])).toEqual([])
})

test('a key revoked while the UI is open brings the login back', async ({ page }) => {
  const k = await asAdmin('POST', '/api/v1/auth/keys', { name: 'short-lived', role: 'readonly' })
  await page.goto(srv.url + '/ui/queues')
  await page.getByLabel('API key').fill(k.key)
  await page.getByRole('button', { name: 'Log in' }).click()
  await expect(page.getByTestId('who')).toContainText('short-lived')
  await asAdmin('DELETE', `/api/v1/auth/keys/${k.id}`)
  // The next call is refused: going to the Dashboard, or the Queues page's
  // own poll when it comes first (then the login has already replaced the
  // link, and the click gives up). Either way the login says why.
  await page.getByRole('link', { name: 'Dashboard' }).click({ timeout: 5_000 }).catch(() => {})
  await expect(page.getByLabel('API key')).toBeVisible()
  await expect(page.getByTestId('login-reason')).toContainText('unknown API key')
})

test('accessibility: no WCAG 2.1 A/AA violations on the login, with or without an error', async ({ browser }) => {
  const ctx = await browser.newContext({ bypassCSP: true }) // axe is injected as an inline script
  const page = await ctx.newPage()
  await page.goto(srv.url + '/ui/')
  await page.getByLabel('API key').waitFor()
  expect(await axeViolations(page)).toEqual([])
  await page.getByLabel('API key').fill('nope')
  await page.getByRole('button', { name: 'Log in' }).click()
  await expect(page.getByTestId('login-error')).toBeVisible()
  expect(await axeViolations(page)).toEqual([])
  await ctx.close()
})

// asAdminIn calls the API with the admin key in namespace ns.
async function asAdminIn(ns: string, method: string, path: string, body?: unknown) {
  const r = await fetch(srv.url + path, {
    method, body: body === undefined ? undefined : JSON.stringify(body),
    headers: { Authorization: `Bearer ${ADMIN}`, 'Content-Type': 'application/json', 'X-Corvo-Namespace': ns },
  })
  if (!r.ok) throw new Error(`${method} ${path} in ${ns}: HTTP ${r.status} ${await r.text()}`)
}

test('an admin makes a namespace on the Namespaces page, works in it, and deletes it', async ({ browser }) => {
  const ctx = await browser.newContext({ bypassCSP: true }) // axe is injected as an inline script
  const page = await ctx.newPage()
  await page.goto(srv.url + '/ui/')
  await page.getByLabel('API key').fill(ADMIN)
  await page.getByRole('button', { name: 'Log in' }).click()
  // One namespace: shown, nothing to pick.
  await expect(page.getByTestId('who-namespace')).toHaveText('default')

  await page.getByRole('link', { name: 'Namespaces' }).click()
  await expect(page.getByRole('heading', { name: 'Namespaces' })).toBeVisible()
  await expect(page.locator('tr[data-namespace="default"]')).toContainText('current')
  expect(await axeViolations(page)).toEqual([])

  // A name the server would refuse is refused here; then a good one.
  await page.getByRole('button', { name: '+ New namespace' }).click()
  const dialog = page.getByRole('dialog', { name: 'New namespace' })
  await dialog.getByLabel('Name').fill('_tmp')
  await dialog.getByRole('button', { name: 'Create' }).click()
  await expect(dialog.getByTestId('ns-create-error')).toContainText('cannot start with - or _')
  expect(await axeViolations(page)).toEqual([])
  await dialog.getByLabel('Name').fill('e2e-tmp')
  await dialog.getByLabel('Description (optional)').fill('made by the browser test')
  await dialog.getByRole('button', { name: 'Create' }).click()
  await expect(dialog).toHaveCount(0)
  const row = page.locator('tr[data-namespace="e2e-tmp"]')
  await expect(row).toContainText('made by the browser test')
  await expect(row.getByTestId('ns-keys')).toHaveText('0')
  await page.setViewportSize({ width: 1440, height: 900 })
  await page.screenshot({ path: `${SHOTS}/namespaces-admin-desktop.png`, animations: 'disabled', caret: 'hide' })

  // The picker now offers it: switching shows its (empty) queues.
  const picker = page.getByRole('combobox', { name: 'Namespace' })
  await expect(picker.locator('option')).toHaveText(['default', 'e2e-tmp'])
  await picker.selectOption('e2e-tmp')
  await expect(page.getByRole('combobox', { name: 'Namespace' })).toHaveValue('e2e-tmp')
  await page.getByRole('link', { name: 'Queues' }).click()
  await expect(page.getByText('No queues yet.')).toBeVisible()

  // A namespace with a queue cannot go: the server's reason is shown.
  await asAdminIn('e2e-tmp', 'POST', '/api/v1/enqueue', { queue: 'tmp.q', payload: {} })
  await page.getByRole('link', { name: 'Namespaces' }).click()
  await row.getByRole('button', { name: 'Delete namespace e2e-tmp' }).click()
  const confirm = page.getByRole('dialog', { name: 'Delete namespace e2e-tmp?' })
  await confirm.getByRole('button', { name: 'Delete' }).click()
  await expect(confirm.getByTestId('ns-delete-error')).toHaveText('namespace e2e-tmp still has queue tmp.q: delete its queues first')
  expect(await axeViolations(page)).toEqual([])
  await confirm.getByRole('button', { name: 'Cancel' }).click()

  // Emptied, it goes, and the console is back in default.
  await asAdminIn('e2e-tmp', 'DELETE', '/api/v1/queues/tmp.q?confirm=true')
  await row.getByRole('button', { name: 'Delete namespace e2e-tmp' }).click()
  await confirm.getByRole('button', { name: 'Delete' }).click()
  await expect(page.getByTestId('who-namespace')).toHaveText('default')
  await expect(page.locator('tr[data-namespace="e2e-tmp"]')).toHaveCount(0)
  await page.getByRole('link', { name: 'Queues' }).click()
  await expect(page.getByRole('link', { name: 'auth.q' })).toBeVisible()
  await ctx.close()
})
