// The audit log page against a server that needs keys: management calls
// made through the API show up, filters narrow them, a refresh brings new
// ones, and a key without audit:read is not offered the page.
import { test, expect } from '@playwright/test'
import { axeViolations } from './axe'
import { startServer, type StartedServer } from './global-setup'

const ADMIN = 'corvo_00000000000a0d17_e2e-audit-admin-key-0123456789abcdefABCDE_x'
const SHOTS = process.env.CORVO_SCREENSHOTS ?? 'screenshots'

let srv: StartedServer
let readonlyKey = ''

async function as(key: string, method: string, path: string, body?: unknown) {
  return fetch(srv.url + path, {
    method, body: body === undefined ? undefined : JSON.stringify(body),
    headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
  })
}
async function asAdmin(method: string, path: string, body?: unknown) {
  const r = await as(ADMIN, method, path, body)
  if (!r.ok) throw new Error(`${method} ${path}: HTTP ${r.status} ${await r.text()}`)
  return r.json()
}

test.beforeAll(async () => {
  srv = await startServer(['--auth', 'on'], { CORVO_ADMIN_KEY: ADMIN })
  await asAdmin('POST', '/api/v1/enqueue', { queue: 'audit.q', payload: { n: 1 } })
  readonlyKey = (await asAdmin('POST', '/api/v1/auth/keys', { name: 'audit-viewer', role: 'readonly' })).key
  await asAdmin('POST', '/api/v1/queues/audit.q/pause')
  const temp = await asAdmin('POST', '/api/v1/auth/keys', { name: 'audit-temp', role: 'producer' })
  await asAdmin('DELETE', `/api/v1/auth/keys/${temp.id}`)
  // A refusal is recorded too.
  expect((await as(readonlyKey, 'POST', '/api/v1/queues/audit.q/resume')).status).toBe(403)
})

test.afterAll(async () => { await srv?.stop() })

test('the audit page shows management calls, filters them by method, refreshes', async ({ browser }) => {
  // axe is injected as an inline script, which the CSP refuses (ui.spec
  // checks the page under the CSP).
  const ctx = await browser.newContext({ bypassCSP: true, viewport: { width: 1440, height: 900 } })
  const page = await ctx.newPage()
  await page.goto(srv.url + '/ui/')
  await page.getByLabel('API key').fill(ADMIN)
  await page.getByRole('button', { name: 'Log in' }).click()
  await page.getByRole('link', { name: 'Audit log' }).click()
  await expect(page).toHaveURL(/\/ui\/audit$/)
  await expect(page.getByRole('heading', { name: 'Audit log' })).toBeVisible()

  const rows = page.locator('tr[data-audit]')
  const pause = rows.filter({ hasText: 'pause queue audit.q' })
  await expect(pause).toHaveCount(1)
  await expect(pause).toContainText('POST /api/v1/queues/audit.q/pause')
  await expect(pause.locator('.badge')).toHaveText('200')
  await expect(rows.filter({ hasText: 'audit-viewer' }).filter({ hasText: 'create a key' })).toHaveCount(1)
  // The readonly key's refused resume: who, 403 in the refusal tone.
  const refused = rows.filter({ hasText: '/api/v1/queues/audit.q/resume' })
  await expect(refused).toHaveCount(1)
  await expect(refused).toContainText('audit-viewer')
  await expect(refused.locator('.badge')).toHaveText('403')
  await expect(refused.locator('.badge')).toHaveClass(/st-refused/)
  // Newest first: the refusal came after the pause.
  const order = await rows.evaluateAll((rs) => rs.map((r) => r.textContent ?? ''))
  expect(order.findIndex((t) => t.includes('/resume'))).toBeLessThan(order.findIndex((t) => t.includes('pause queue audit.q')))
  expect(await axeViolations(page)).toEqual([])
  await page.screenshot({ path: `${SHOTS}/audit-records-desktop.png`, fullPage: true, animations: 'disabled', caret: 'hide' })

  // Filter by method: only the key's revocation is a DELETE.
  await page.getByLabel('Method').selectOption('DELETE')
  await page.getByRole('button', { name: 'Filter' }).click()
  await expect(page).toHaveURL(/\/ui\/audit\?method=DELETE$/)
  await expect(rows).toHaveCount(1)
  await expect(rows.first()).toHaveAttribute('data-method', 'DELETE')
  await expect(rows.first()).toContainText('/api/v1/auth/keys/')
  // A filter nothing matches: the empty state, still accessible.
  await page.getByLabel('Path prefix').fill('/api/v1/schedules')
  await page.getByRole('button', { name: 'Filter' }).click()
  await expect(page.getByText('No audited call matches these filters.')).toBeVisible()
  expect(await axeViolations(page)).toEqual([])

  // Reset, then a new call shows after Refresh.
  await page.getByRole('button', { name: 'Reset' }).click()
  await expect(pause).toHaveCount(1)
  // (The readonly key's refused resume is already there.)
  const resumes = rows.filter({ hasText: 'POST /api/v1/queues/audit.q/resume' })
  await expect(resumes).toHaveCount(1)
  await asAdmin('POST', '/api/v1/queues/audit.q/resume')
  await page.getByRole('button', { name: 'Refresh' }).click()
  await expect(resumes).toHaveCount(2)
  await expect(resumes.first().locator('.badge')).toHaveText('200')
  await expect(resumes.first()).toHaveAttribute('data-status', '200')
  await ctx.close()
})

test('a readonly key (no audit:read) is not offered the audit page', async ({ page }) => {
  await page.goto(srv.url + '/ui/')
  await page.getByLabel('API key').fill(readonlyKey)
  await page.getByRole('button', { name: 'Log in' }).click()
  await expect(page.getByTestId('who')).toContainText('audit-viewer')
  const nav = page.getByRole('navigation', { name: 'Main' })
  await expect(nav.getByRole('link', { name: 'Cluster' })).toBeVisible()
  await expect(nav.getByRole('link', { name: 'Audit log' })).toHaveCount(0)
  // Opened by its URL, the page says why instead of asking the server.
  await page.goto(srv.url + '/ui/audit')
  await expect(page.getByText(/may not read the audit log/)).toContainText('role readonly')
})
