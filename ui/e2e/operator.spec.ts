// What the operator on call reads and does (issue 19), against a server
// of its own so counts are exact: held jobs counted and linked, dead
// letters with when and why and their own actions at one line a row,
// results first on a queue's page, workers on long leases, the Move
// dialog's priority, schedules run now / paused, big payloads in a list.
import { test, expect, type Browser, type Page } from '@playwright/test'
import { startServer, type StartedServer } from './global-setup'

let srv: StartedServer

async function call<T = any>(method: string, path: string, body?: unknown): Promise<T> {
  const r = await fetch(srv.url + path, {
    method, headers: method === 'GET' ? {} : { 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  const text = await r.text()
  if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${text}`)
  return (text ? JSON.parse(text) : null) as T
}
async function until<T>(what: string, f: () => Promise<T | null | undefined | false>, ms = 10_000): Promise<T> {
  const end = Date.now() + ms
  for (;;) {
    const v = await f()
    if (v) return v
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 50))
  }
}
const total = async (filter: Record<string, unknown>) => (await call<{ total: number }>('POST', '/api/v1/jobs/search', { ...filter, limit: 1 })).total

let parent = ''
let held = ''
const DEAD = 30

test.beforeAll(async () => {
  srv = await startServer()
  // A parent job leased for an hour by a worker, a held job waiting on it.
  parent = (await call('POST', '/api/v1/enqueue', { queue: 'render', payload: { frame: 1 }, lease_duration: 3600 })).job_id
  const got = await call<{ jobs: { job_id: string }[] }>('POST', '/api/v1/fetch', { queues: ['render'], worker_id: 'long-lease', hostname: 'gpu-1', count: 1, timeout: 0 })
  if (got.jobs[0]?.job_id !== parent) throw new Error('did not lease the parent')
  held = (await call('POST', '/api/v1/enqueue', { queue: 'publish', payload: { post: 1 }, depends_on: [parent] })).job_id
  // Dead letters: no retries, failed once each.
  const ids = (await call<{ job_ids: string[] }>('POST', '/api/v1/enqueue/batch', { jobs: Array.from({ length: DEAD }, (_, i) => ({ queue: 'hooks', payload: { hook: i }, max_retries: 0 })) })).job_ids
  const leased = await call<{ jobs: { job_id: string }[] }>('POST', '/api/v1/fetch', { queues: ['hooks'], worker_id: 'failer', count: DEAD, timeout: 0 })
  if (leased.jobs.length !== DEAD) throw new Error(`fetched ${leased.jobs.length} of ${DEAD}`)
  for (const j of leased.jobs) await call('POST', `/api/v1/fail/${j.job_id}`, { error: `HTTP 502 from https://hooks.example.com/${ids.indexOf(j.job_id)}`, worker_id: 'failer' })
  // A queue with enough jobs to fill a screen.
  await call('POST', '/api/v1/enqueue/batch', { jobs: Array.from({ length: 40 }, (_, i) => ({ queue: 'emails', payload: { to: `u${i}@example.org` } })) })
  await until('the mirror', async () => (await total({})) === 1 + 1 + DEAD + 40)
})

test.afterAll(async () => { await srv?.stop() })

async function desk(browser: Browser): Promise<Page> {
  const ctx = await browser.newContext({ baseURL: srv.url, viewport: { width: 1440, height: 900 } })
  return ctx.newPage()
}

test('held jobs are counted on the dashboard, the Queues page and the queue page; a held job links what it waits for', async ({ browser }) => {
  const page = await desk(browser)
  await page.goto('/ui/')
  await expect(page.getByTestId('stat-held')).toHaveText('1')
  await page.goto('/ui/queues')
  await expect(page.locator('tr[data-queue="publish"]').getByTestId('q-held')).toHaveText('1')
  await page.goto('/ui/queues/publish')
  await expect(page.getByTestId('q-held')).toHaveText('1')
  await page.goto(`/ui/jobs/${held}`)
  const deps = page.getByTestId('dependencies')
  await expect(deps).toContainText('0 of 1 completed')
  await expect(deps.locator('.badge')).toHaveText('active')
  await deps.getByRole('link').click()
  await expect(page).toHaveURL(new RegExp(`/ui/jobs/${parent}$`))
  await page.context().close()
})

test('dead letters: when and why each died, one line a row (25+ on a 1440×900 screen), Retry and Delete per row', async ({ browser }) => {
  const page = await desk(browser)
  await page.goto('/ui/dead')
  await expect(page.getByTestId('result-count')).toContainText(`${DEAD} results`)
  await expect(page.getByLabel('jq filter')).toHaveCount(0) // the form starts folded
  const rows = page.locator('tr[data-job]')
  await expect(rows).toHaveCount(DEAD)
  const first = rows.first()
  await expect(first.getByTestId('attempts')).toHaveText('1 of 1')
  await expect(first.getByTestId('reason')).toContainText('out of attempts: HTTP 502 from https://hooks.example.com/')
  await expect(first.getByTestId('died')).toHaveText(/just now|\ds ago/)
  expect(await page.locator('thead th').allInnerTexts()).toContain('DIED')
  // Rows on screen without scrolling.
  const visible = await rows.evaluateAll((rs) => rs.filter((r) => r.getBoundingClientRect().bottom <= window.innerHeight).length)
  expect(visible).toBeGreaterThanOrEqual(25)
  const heights = await rows.evaluateAll((rs) => rs.map((r) => Math.round(r.getBoundingClientRect().height)))
  expect(Math.max(...heights)).toBeLessThanOrEqual(30)

  const retried = await first.getAttribute('data-job') as string
  await first.getByRole('button', { name: `Retry ${retried}` }).click()
  await expect(page.locator(`tr[data-job="${retried}"]`)).toHaveCount(0)
  expect((await call(`GET`, `/api/v1/jobs/${retried}`)).state).toBe('pending')
  const doomed = await rows.first().getAttribute('data-job') as string
  await rows.first().getByRole('button', { name: `Delete ${doomed}` }).click()
  await page.getByRole('dialog', { name: 'Delete this job?' }).getByRole('button', { name: 'Delete job' }).click()
  await expect(page.locator(`tr[data-job="${doomed}"]`)).toHaveCount(0)
  expect((await fetch(`${srv.url}/api/v1/jobs/${doomed}`)).status).toBe(404)
  await page.context().close()
})

test('a queue page puts its results first at 1440×900, its form folded until wanted', async ({ browser }) => {
  const page = await desk(browser)
  await page.goto('/ui/queues/emails')
  await expect(page.getByTestId('result-count')).toContainText('40 results')
  await expect(page.getByLabel('jq filter')).toHaveCount(0)
  const top = await page.locator('tr[data-job]').nth(9).evaluate((r) => r.getBoundingClientRect().bottom)
  expect(top, 'ten result rows above the fold').toBeLessThanOrEqual(900)
  await page.getByTestId('show-filters').click()
  await page.getByLabel('jq filter').fill('.to == "u7@example.org"')
  await page.getByRole('button', { name: 'Search', exact: true }).click()
  await expect(page.getByTestId('result-count')).toContainText('1 result')
  // With a filter in the URL the form is open.
  await page.reload()
  await expect(page.getByLabel('jq filter')).toHaveValue('.to == "u7@example.org"')
  // Per-row cancel from the list.
  const id = await page.locator('tr[data-job]').first().getAttribute('data-job') as string
  await page.getByRole('button', { name: `Cancel ${id}` }).click()
  await until('the cancel', async () => (await call('GET', `/api/v1/jobs/${id}`)).state === 'cancelled')
  await page.context().close()
})

test('a worker quiet for minutes but holding a long lease shows connected; first seen is a time, not "0ms"', async ({ browser }) => {
  const page = await desk(browser)
  // The browser's clock runs 10 minutes ahead: both workers were last heard
  // from long ago; one holds the render job under its one-hour lease.
  await page.clock.setFixedTime(Date.now() + 10 * 60_000)
  await page.goto('/ui/workers')
  await expect(page.locator('tr[data-worker="long-lease"]')).toHaveAttribute('data-status', 'busy')
  await expect(page.locator('tr[data-worker="failer"]')).toHaveAttribute('data-status', 'gone')
  await expect(page.getByTestId('workers-connected')).toContainText('1 connected')
  await expect(page.locator('main')).not.toContainText('0ms')
  await expect(page.locator('tr[data-worker="long-lease"] td').nth(3)).toHaveText(/\d+m ago/)
  await page.context().close()
})

test('the Move dialog keeps the priority when asked to, and sets the chosen one otherwise', async ({ browser }) => {
  const page = await desk(browser)
  const [a, b] = (await call<{ job_ids: string[] }>('POST', '/api/v1/enqueue/batch', { jobs: [{ queue: 'mv', payload: {}, priority: 'critical' }, { queue: 'mv', payload: {}, priority: 'critical' }] })).job_ids
  for (const [id, keep] of [[a, true], [b, false]] as const) {
    await page.goto(`/ui/jobs/${id}`)
    await page.getByRole('button', { name: 'Move…' }).click()
    const d = page.getByRole('dialog', { name: 'Move job to queue' })
    await d.getByLabel('Target queue').fill('mv.other')
    if (keep) await d.getByLabel('Keep current priority (critical)').check()
    else await d.getByLabel('New priority').selectOption('high')
    await d.getByRole('button', { name: 'Move', exact: true }).click()
    await expect(page.locator('.facts')).toContainText('mv.other')
    const now = await call<{ queue: string; priority: string }>('GET', `/api/v1/jobs/${id}`)
    expect(now.queue).toBe('mv.other')
    expect(now.priority).toBe(keep ? 'critical' : 'high')
  }
  await page.context().close()
})

test('schedules: run now links the run’s job; pause and resume', async ({ browser }) => {
  const page = await desk(browser)
  await call('POST', '/api/v1/schedules', { name: 'nightly', queue: 'reports', cron: '0 3 * * *', payload: { kind: 'nightly' } })
  await page.goto('/ui/schedules')
  const row = page.locator('tr[data-schedule="nightly"]')
  await row.getByRole('button', { name: 'Run now: schedule nightly' }).click()
  const link = row.getByTestId('last-job')
  await expect(link).toBeVisible()
  const sc = (await call<{ schedules: { name: string; last_job_id: string }[] }>('GET', '/api/v1/schedules')).schedules.find((s) => s.name === 'nightly')!
  expect(await link.getAttribute('href')).toBe(`/ui/jobs/${sc.last_job_id}`)
  expect((await call('GET', `/api/v1/jobs/${sc.last_job_id}`)).tags).toEqual({ schedule: expect.stringMatching(/^sched_/) })
  await row.getByRole('button', { name: 'Pause schedule nightly' }).click()
  await expect(row.getByTestId('schedule-paused')).toBeVisible()
  expect((await call<{ schedules: { name: string; paused: boolean }[] }>('GET', '/api/v1/schedules')).schedules.find((s) => s.name === 'nightly')!.paused).toBe(true)
  await row.getByRole('button', { name: 'Resume schedule nightly' }).click()
  await expect(row.getByTestId('schedule-paused')).toHaveCount(0)
  await page.context().close()
})

test('a payload too big for a search page says its size and links the job', async ({ browser }) => {
  const page = await desk(browser)
  const big = 'x'.repeat(12 * 1024)
  const id = (await call('POST', '/api/v1/enqueue', { queue: 'big', payload: { blob: big } })).job_id
  await until('the mirror', async () => (await total({ queue: 'big' })) === 1)
  await page.goto('/ui/queues/big')
  const cell = page.locator(`tr[data-job="${id}"]`).getByTestId('payload-omitted')
  await expect(cell).toHaveText(/^payload of 12\.\d KiB — open the job$/)
  await cell.click()
  await expect(page).toHaveURL(new RegExp(`/ui/jobs/${id}$`))
  await expect(page.getByTestId('payload')).toContainText('xxxx')
  await page.context().close()
})
