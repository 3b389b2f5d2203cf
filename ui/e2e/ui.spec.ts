// The UI in a real browser against a real server with seeded jobs.
// Serial: later tests change the jobs earlier ones count.
import { test, expect, type Page } from '@playwright/test'
import { mkdirSync } from 'node:fs'
import { axeViolations } from './axe'
import { call, enqueueBatch, fetchJobs, heartbeat, seed, waitFor, type Seeded } from './seed'

test.describe.configure({ mode: 'serial' })

let s: Seeded

test.beforeAll(async () => {
  s = await seed()
})

const SHOTS = process.env.CORVO_SCREENSHOTS ?? 'screenshots'
const sizes = { desktop: { width: 1440, height: 900 }, phone: { width: 390, height: 844 } } as const

async function noReloadMarker(page: Page) {
  await page.evaluate(() => { (window as unknown as { __noReload: number }).__noReload = 42 })
}
async function expectNoReload(page: Page) {
  expect(await page.evaluate(() => (window as unknown as { __noReload?: number }).__noReload)).toBe(42)
}

test('the dashboard shows the right counts', async ({ page }) => {
  await page.goto('/')
  await expect(page).toHaveURL(/\/ui\/$/)
  await expect(page.getByTestId('stat-pending')).toHaveText(String(s.pending))
  await expect(page.getByTestId('stat-active')).toHaveText(String(s.active))
  await expect(page.getByTestId('stat-dead')).toHaveText(String(s.dead))
  await expect(page.getByTestId('stat-queues')).toHaveText(String(s.queues.length))
  await expect(page.getByTestId('stat-scheduled')).toHaveText(String(s.scheduled))
  await expect(page.getByTestId('stat-retrying')).toHaveText('0')
  // The queues table has a row per queue with its own counts.
  const row = page.locator('tr[data-queue="orders.charge"]')
  await expect(row.locator('td').nth(0)).toHaveText('30')
  await expect(page.locator('tr[data-queue="webhooks.deliver"] td a.bad')).toHaveText('4')
  // Numbers move without a reload when jobs arrive.
  await noReloadMarker(page)
  await enqueueBatch(Array.from({ length: 3 }, () => ({ queue: 'orders.charge', payload: { late: true } })))
  await expect(page.getByTestId('stat-pending')).toHaveText(String(s.pending + 3))
  await expectNoReload(page)
  // Recent failures lists the dead webhooks with their error.
  await expect(page.locator('.failures li').first()).toContainText('HTTP 502')
})

test('the Content-Security-Policy blocks nothing the UI needs', async ({ page }) => {
  const violations: string[] = []
  page.on('console', (m) => { if (/Content.Security.Policy/i.test(m.text())) violations.push(m.text()) })
  await page.addInitScript(() => {
    document.addEventListener('securitypolicyviolation', (e) => {
      const w = window as unknown as { __csp?: string[] }
      w.__csp = (w.__csp ?? []).concat(`${e.violatedDirective} ${e.blockedURI}`)
    })
  })
  for (const path of ['/ui/', '/ui/queues', '/ui/jobs', '/ui/dead', '/ui/schedules', '/ui/bulk', '/ui/cluster', '/ui/audit', `/ui/jobs/${s.gold_big[0]}`]) {
    const res = await page.goto(path)
    expect(res?.headers()['content-security-policy'], path).toContain("script-src 'self' 'sha256-")
    await expect(page.locator('#app > *').first(), path).toBeVisible()
    expect(await page.evaluate(() => (window as unknown as { __csp?: string[] }).__csp ?? []), path).toEqual([])
  }
  // The inline theme script (allowed by its hash) ran before the app.
  expect(await page.evaluate(() => document.documentElement.dataset.theme)).toMatch(/^(light|dark)$/)
  expect(violations).toEqual([])
})

test('a search by payload_jq finds the right jobs and lives in the URL', async ({ page }) => {
  await page.goto('/ui/jobs')
  const jq = '.tier == "gold" and .amount > 100'
  await page.getByLabel('jq filter').fill(jq)
  await page.getByRole('button', { name: 'Search', exact: true }).click()
  await expect(page).toHaveURL(/[?&]jq=/)
  await expect(page.getByTestId('result-count')).toContainText(`${s.gold_big.length} results`)
  const ids = await page.locator('tr[data-job]').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-job')))
  expect([...ids].sort()).toEqual([...s.gold_big].sort())
  // The URL alone reproduces the search (shareable).
  const shared = page.url()
  const other = await page.context().newPage()
  await other.goto(shared)
  await expect(other.getByLabel('jq filter')).toHaveValue(jq)
  await expect(other.getByTestId('result-count')).toContainText(`${s.gold_big.length} results`)
  await other.close()
  // A bad jq expression is explained, not swallowed.
  await page.getByLabel('jq filter').fill('.a | frobnicate')
  await page.getByRole('button', { name: 'Search', exact: true }).click()
  await expect(page.getByRole('alert')).toBeVisible()
})

test('a bulk retry of dead jobs from the UI makes them pending', async ({ page }) => {
  await page.goto('/ui/dead')
  await expect(page.getByTestId('result-count')).toContainText(`${s.dead} results`)
  await page.getByText(`Bulk on all ${s.dead}`).click()
  await page.getByRole('menuitem', { name: 'Retry all matching' }).click()
  const dialog = page.getByRole('dialog')
  await expect(dialog).toContainText(`This will retry ${s.dead} jobs`)
  await expect(dialog.getByTestId('bulk-preview').locator('tr')).toHaveCount(4)
  await dialog.getByTestId('bulk-confirm').click()
  await expect(dialog.getByTestId('bulk-result')).toContainText(`${s.dead} jobs affected`)
  for (const id of s.dead_ids) {
    const j = await call<{ state: string; attempt: number }>('GET', `/api/v1/jobs/${id}`)
    expect(j.state).toBe('pending')
    expect(j.attempt).toBe(0)
  }
  await dialog.getByRole('button', { name: 'Close' }).click()
  await expect(page.getByTestId('result-count')).toContainText('0 results')
})

test('a bulk action on a selection with confirmation (priority)', async ({ page }) => {
  await page.goto('/ui/queues/emails.send?priority=normal')
  await expect(page.getByTestId('result-count')).toContainText('10 results')
  const rows = page.locator('tr[data-job]')
  const picked = [await rows.nth(0).getAttribute('data-job'), await rows.nth(1).getAttribute('data-job')] as string[]
  await rows.nth(0).getByRole('checkbox').check()
  await rows.nth(1).getByRole('checkbox').check()
  await page.getByRole('region', { name: 'Bulk actions for the selection' }).getByRole('button', { name: 'Priority…' }).click()
  const dialog = page.getByRole('dialog')
  await dialog.getByLabel('New priority').selectOption('critical')
  await dialog.getByTestId('bulk-confirm').click()
  await expect(dialog.getByTestId('bulk-result')).toContainText('2 jobs affected')
  for (const id of picked) expect((await call<{ priority: string }>('GET', `/api/v1/jobs/${id}`)).priority).toBe('critical')
})

test('the job page shows progress moving while a worker reports it', async ({ page }) => {
  await heartbeat(s.worker, s.progress_job, { current: 10, total: 100, message: 'encoding' })
  await page.goto(`/ui/jobs/${s.progress_job}`)
  await expect(page.getByTestId('job-state')).toContainText('active')
  await expect(page.getByTestId('progress-text')).toContainText('10 / 100 (10%) — encoding')
  await noReloadMarker(page)
  await heartbeat(s.worker, s.progress_job, { current: 55, total: 100, message: 'encoding' })
  await expect(page.getByTestId('progress-text')).toContainText('55 / 100 (55%)')
  await heartbeat(s.worker, s.progress_job, { current: 90, total: 100, message: 'muxing' })
  await expect(page.getByTestId('progress-text')).toContainText('90 / 100 (90%) — muxing')
  await expect(page.getByRole('progressbar', { name: 'Job progress' })).toHaveAttribute('aria-valuenow', '90')
  await expectNoReload(page)
  await expect(page.getByTestId('payload')).toContainText('movie.mp4')
  await expect(page.getByTestId('timeline')).toContainText('started')
})

test('a paused queue shows paused, from the API and from the UI', async ({ page }) => {
  await call('POST', '/api/v1/queues/reports.generate/pause')
  await page.goto('/ui/queues')
  await expect(page.locator('tr[data-queue="reports.generate"]').getByTestId('paused-badge')).toBeVisible()
  await expect(page.locator('tr[data-queue="orders.charge"]').getByTestId('paused-badge')).toHaveCount(0)
  // Pause another one from its page.
  await page.goto('/ui/queues/orders.charge')
  await expect(page.getByTestId('queue-status')).toHaveText('▶ running')
  await page.getByRole('button', { name: 'Pause queue orders.charge' }).click()
  await expect(page.getByTestId('queue-status')).toHaveText('‖ paused')
  const qs = await call<{ queues: { name: string; paused: boolean }[] }>('GET', '/api/v1/queues')
  expect(qs.queues.find((q) => q.name === 'orders.charge')?.paused).toBe(true)
  await page.getByRole('button', { name: 'Resume queue orders.charge' }).click()
  await expect(page.getByTestId('queue-status')).toHaveText('▶ running')
})

test('move a job to another queue from its page', async ({ page }) => {
  const [id] = await enqueueBatch([{ queue: 'emails.send', payload: { to: 'mover@example.org' } }])
  await page.goto(`/ui/jobs/${id}`)
  await page.getByRole('button', { name: 'Move…' }).click()
  const dialog = page.getByRole('dialog', { name: 'Move job to queue' })
  await dialog.getByLabel('Target queue').fill('emails.legacy')
  await dialog.getByRole('button', { name: 'Move', exact: true }).click()
  await expect(page.locator('.facts')).toContainText('emails.legacy')
  const moved = await call<{ queue: string }>('GET', `/api/v1/jobs/${decodeURIComponent(page.url().split('/jobs/')[1])}`)
  expect(moved.queue).toBe('emails.legacy')
})

test('approve held jobs from the held view', async ({ page }) => {
  const [a, b] = (await Promise.all([0, 1].map((i) => call<{ job_id: string }>('POST', '/api/v1/enqueue', { queue: 'publish', payload: { post: i }, depends_on: [s.progress_job] })))).map((r) => r.job_id)
  await waitFor('the mirror to see the held jobs', async () => (await call<{ total: number }>('POST', '/api/v1/jobs/search', { state: ['held'], queue: 'publish', limit: 1 })).total >= 2)
  await page.goto('/ui/held?queue=publish')
  await page.locator(`tr[data-job="${a}"]`).getByRole('checkbox').check()
  await page.getByRole('region', { name: 'Bulk actions for the selection' }).getByRole('button', { name: 'Approve' }).click()
  await expect(page.getByRole('status').filter({ hasText: 'Approved 1 of 1' })).toBeVisible()
  expect((await call<{ state: string }>('GET', `/api/v1/jobs/${a}`)).state).toBe('pending')
  expect((await call<{ state: string }>('GET', `/api/v1/jobs/${b}`)).state).toBe('held')
  await call('DELETE', `/api/v1/jobs/${b}`)
})

test('create and edit a schedule', async ({ page }) => {
  await page.goto('/ui/schedules')
  await page.getByRole('button', { name: '+ New schedule' }).click()
  const d = page.getByRole('dialog', { name: 'New schedule' })
  await d.getByLabel('Name').fill('ui-nightly')
  await d.getByLabel('Queue').fill('reports.nightly')
  await d.getByLabel(/^Cron/).fill('30 2 * * *')
  await d.getByLabel('Time zone').fill('UTC')
  await d.getByRole('button', { name: 'Create' }).click()
  const row = page.locator('tr', { hasText: 'ui-nightly' })
  await expect(row).toContainText('30 2 * * *')
  await row.getByRole('button', { name: 'Edit schedule ui-nightly' }).click()
  const e = page.getByRole('dialog', { name: 'Edit schedule ui-nightly' })
  await e.getByLabel(/^Cron/).fill('45 3 * * *')
  await e.getByRole('button', { name: 'Save' }).click()
  await expect(row).toContainText('45 3 * * *')
  const all = await call<{ schedules: { name: string; cron: string; next_run: string }[] }>('GET', '/api/v1/schedules')
  const sc = all.schedules.find((x) => x.name === 'ui-nightly')!
  expect(sc.cron).toBe('45 3 * * *')
  expect(sc.next_run).toMatch(/T03:45:00/)
})

test('the cluster page shows a single node as such, with its shards', async ({ page }) => {
  const r = await fetch(process.env.CORVO_E2E_URL + '/api/v1/cluster/status')
  await page.goto('/ui/cluster')
  await expect(page.getByTestId('single-node')).toContainText('Single node')
  if (r.status === 200) {
    const st = (await r.json()) as { nodes: unknown[]; shards: unknown[] }
    await expect(page.getByTestId('cluster-nodes')).toHaveText(`${st.nodes.length}/${st.nodes.length}`)
    await expect(page.getByRole('heading', { name: 'Shards' })).toBeVisible()
    // one row per shard plus the meta group
    await expect(page.locator('table').nth(1).locator('tbody tr')).toHaveCount(st.shards.length + 1)
  }
})

let batchId = ''

test('a batch page: counts, members and callback, reached from a member', async ({ page }) => {
  const r = await call<{ job_ids: string[]; batch_id: string }>('POST', '/api/v1/enqueue/batch', {
    jobs: [0, 1, 2].map((i) => ({ queue: 'thumbs.make', payload: { img: i }, max_retries: 0 })),
    batch: { callback_queue: 'thumbs.done', callback_payload: { album: 7 } },
  })
  batchId = r.batch_id
  const [ok, bad] = await fetchJobs('thumbs.make', 'e2e-thumbs', 2)
  await call('POST', `/api/v1/ack/${ok.job_id}`, { worker_id: 'e2e-thumbs' })
  await call('POST', `/api/v1/fail/${bad.job_id}`, { error: 'corrupt image', worker_id: 'e2e-thumbs' })
  const rest = r.job_ids.find((id) => id !== ok.job_id && id !== bad.job_id)!
  // From a member's page to its batch.
  await page.goto(`/ui/jobs/${rest}`)
  await page.getByTestId('job-batch').getByRole('link', { name: r.batch_id }).click()
  await expect(page).toHaveURL(new RegExp(`/ui/batches/${r.batch_id}$`))
  await expect(page.getByRole('heading', { level: 1 })).toContainText(r.batch_id)
  await expect(page.getByTestId('batch-total')).toHaveText('3')
  await expect(page.getByTestId('batch-succeeded')).toHaveText('1')
  await expect(page.getByTestId('batch-failed')).toHaveText('1')
  await expect(page.getByTestId('batch-pending')).toHaveText('1')
  await expect(page.getByTestId('batch-callback')).toContainText('once every job has finished')
  await expect(page.locator('tr[data-job]')).toHaveCount(3)
  await expect(page.getByTestId('result-count')).toContainText('3 results')
  // A count filters the members by state.
  await page.getByTestId('batch-failed').click()
  await expect(page).toHaveURL(/state=dead(%2C|,)cancelled/)
  await expect(page.locator('tr[data-job]')).toHaveCount(1)
  await expect(page.locator(`tr[data-job="${bad.job_id}"]`)).toBeVisible()
  // The last member finishes: the callback job appears, linked, without a reload.
  await noReloadMarker(page)
  const [last] = await fetchJobs('thumbs.make', 'e2e-thumbs', 1)
  expect(last.job_id).toBe(rest)
  await call('POST', `/api/v1/ack/${rest}`, { worker_id: 'e2e-thumbs' })
  const cb = page.getByTestId('batch-callback').getByRole('link')
  await expect(cb).toBeVisible()
  await expect(page.getByTestId('batch-pending')).toHaveText('0')
  await expectNoReload(page)
  const cbId = (await cb.textContent())!
  await cb.click()
  await expect(page).toHaveURL(new RegExp(`/ui/jobs/${cbId}$`))
  const job = await call<{ queue: string; payload: { album: number; batch: { id: string; succeeded: number; failed: number } } }>('GET', `/api/v1/jobs/${cbId}`)
  expect(job.queue).toBe('thumbs.done')
  expect(job.payload.batch).toMatchObject({ id: r.batch_id, succeeded: 2, failed: 1 })
  // An unknown batch says so.
  await page.goto('/ui/batches/batch_0_01J000000000000000000000ZZ')
  await expect(page.getByRole('heading', { name: 'Batch not found' })).toBeVisible()
})

test("a job's parents and children link both ways", async ({ page }) => {
  const [a, b] = await enqueueBatch([{ queue: 'etl.extract', payload: { part: 1 } }, { queue: 'etl.extract', payload: { part: 2 } }])
  const c = (await call<{ job_id: string }>('POST', '/api/v1/enqueue', { queue: 'etl.load', payload: { parts: 2 }, depends_on: [a, b] })).job_id
  await page.goto(`/ui/jobs/${c}`)
  const deps = page.getByTestId('dependencies')
  await expect(deps).toContainText('0 of 2 completed')
  await expect(page.getByTestId('dependents')).toHaveCount(0) // nothing waits on c
  // Parent: from the child to a, and from a back to its child.
  await deps.locator(`a[title="${a}"]`).click()
  await expect(page).toHaveURL(new RegExp(`/ui/jobs/${a}$`))
  const kids = page.getByTestId('dependents')
  await expect(kids).toContainText('1 job')
  await expect(kids.locator(`a[title="${c}"]`)).toBeVisible()
  await expect(kids.locator('.badge')).toHaveText('held')
  await kids.locator(`a[title="${c}"]`).click()
  await expect(page).toHaveURL(new RegExp(`/ui/jobs/${c}$`))
  // The parents complete: the child's page follows (counts and states).
  for (const j of await fetchJobs('etl.extract', 'e2e-etl', 2)) await call('POST', `/api/v1/ack/${j.job_id}`, { worker_id: 'e2e-etl' })
  await expect(deps).toContainText('2 of 2 completed')
  await expect(page.getByTestId('job-state')).toContainText('pending')
  // "Waiting on job" in the search finds the children too.
  await page.goto(`/ui/jobs?depends_on=${b}`)
  await expect(page.getByTestId('result-count')).toContainText('1 result')
  await expect(page.locator(`tr[data-job="${c}"]`)).toBeVisible()
})

// Usage seeded through the API as workers report it (acks and a
// heartbeat with usage), a result cache hit, two budgets (set first: a
// budget counts the reports made after it), a routed job that fell back
// and its scores, two providers (one linked to a queue); the screenshots
// show them.
let usageJobs: { summarize: string[]; classify: string; cached: string }

test('the cost page shows the seeded spend, by queue, model, provider and tag, the cache, the budgets and the provider limits; the job page its scores and model', async ({ page }) => {
  const model = 'claude-sonnet-4-5'
  const cache = { enabled: true, ttl: '1h' }
  await call('PUT', '/api/v1/budgets', { scope: 'queue:llm.summarize', daily_usd: 2, per_job_usd: 1, on_exceed: 'hold' })
  await call('PUT', '/api/v1/budgets', { scope: 'tag:tenant=acme', daily_usd: 1, on_exceed: 'alert_only' })
  const summarize = await enqueueBatch([0, 1, 2].map((i) => ({ queue: 'llm.summarize', payload: { doc: `d${i}` }, tags: { tenant: i ? 'acme' : 'globex' }, cache })))
  const [classify] = await enqueueBatch([{ queue: 'llm.classify', payload: { text: 'hello' }, tags: { tenant: 'acme' }, routing: { prefer: 'gpt-4o', fallback: ['gpt-4o-mini'] } }])
  const costs = [0.75, 0.5, 0.25]
  for (const j of await fetchJobs('llm.summarize', 'e2e-llm', 3)) {
    const i = summarize.indexOf(j.job_id)
    await call('POST', `/api/v1/ack/${j.job_id}`, { worker_id: 'e2e-llm', result: { summary: `s${i}` },
      usage: { input_tokens: 1000 * (i + 1), output_tokens: 100 * (i + 1), cache_read_tokens: 50, model, provider: 'anthropic', cost_usd: costs[i], latency_ms: 1200 } })
  }
  // The preferred model's provider fails: the job moves to its fallback.
  const first = (await fetchJobs('llm.classify', 'e2e-llm', 1))[0] as { job_id: string; routing?: { target: string; index: number } }
  expect(first).toMatchObject({ job_id: classify, routing: { target: 'gpt-4o', index: 0 } })
  await call('POST', `/api/v1/fail/${classify}`, { worker_id: 'e2e-llm', error: 'HTTP 529 overloaded', provider_error: true })
  expect((await fetchJobs('llm.classify', 'e2e-llm', 1))[0]).toMatchObject({ job_id: classify, routing: { target: 'gpt-4o-mini', index: 1 } })
  // A running total on a heartbeat, then what came after it on the ack.
  await call('POST', '/api/v1/heartbeat', { worker_id: 'e2e-llm', jobs: { [classify]: { usage: { input_tokens: 300, output_tokens: 20, model: 'gpt-4o-mini', provider: 'openai', cost_usd: 0.125 } } } })
  await call('POST', `/api/v1/ack/${classify}`, { worker_id: 'e2e-llm', result: { label: 'greeting' }, usage: { input_tokens: 200, output_tokens: 10, model: 'gpt-4o-mini', provider: 'openai', cost_usd: 0.125, latency_ms: 400 } })
  // The same document again: answered from the cache, never fetched.
  const hit = await call<{ job_id: string; cached: boolean; cached_from: string }>('POST', '/api/v1/enqueue', { queue: 'llm.summarize', payload: { doc: 'd2' }, cache })
  expect(hit.cached).toBe(true)
  expect(hit.cached_from).toBe(summarize[2])
  usageJobs = { summarize, classify, cached: hit.job_id }
  await call('POST', `/api/v1/jobs/${classify}/score`, { dimensions: { accuracy: 0.92, relevance: 0.85 }, scorer: 'human:ann', comment: 'the right label' })
  await call('POST', `/api/v1/jobs/${classify}/score`, { dimensions: { accuracy: 0.8 }, scorer: 'llm-judge' })
  // Providers, linked once the usage is in: their last minute holds none
  // of it, however long the seeding took.
  await call('PUT', '/api/v1/providers', { name: 'anthropic', rpm_limit: 600, input_tpm_limit: 400_000 })
  await call('PUT', '/api/v1/providers', { name: 'openai', output_tpm_limit: 50_000 })
  await call('POST', '/api/v1/queues/llm.summarize/provider', { provider: 'anthropic' })

  await page.goto('/ui/cost')
  await expect(page.getByRole('link', { name: 'Cost', exact: true })).toHaveAttribute('aria-current', 'page')
  await expect(page.getByTestId('cost-spend')).toHaveText('$1.75')
  await expect(page.getByTestId('cost-jobs')).toHaveText('4')
  await expect(page.getByTestId('cost-per-job')).toHaveText('$0.4375')
  await expect(page.getByTestId('cost-input')).toHaveText('6,500')
  await expect(page.getByTestId('cost-hit-rate')).toHaveText('25%') // 1 hit, 3 misses: the jobs enqueued with a cache
  await expect(page.getByTestId('cost-savings')).toHaveText('$0.25')
  const row = (what: string, key: string) => page.getByTestId(`cost-by-${what}`).locator(`tr[data-key="${key}"]`)
  await expect(row('queue', 'llm.summarize').locator('td').first()).toHaveText('$1.50')
  await expect(row('queue', 'llm.classify').locator('td').first()).toHaveText('$0.25')
  await expect(row('model', model).locator('td').nth(1)).toHaveText('3')
  await expect(row('provider', 'openai').locator('td').first()).toHaveText('$0.25')
  // Budget used today: summarize's $1.50 of $2, acme's $1.00 of $1 (spent).
  const budget = (scope: string) => page.getByTestId('budgets').locator(`tr[data-scope="${scope}"]`)
  await expect(budget('queue:llm.summarize').getByTestId('budget-spent')).toHaveText('$1.50 of $2.00 (75%)')
  await expect(budget('queue:llm.summarize')).toHaveClass('budget-ok')
  await expect(budget('queue:llm.summarize').locator('td').nth(1)).toHaveText('$1.00')
  await expect(budget('queue:llm.summarize').getByTestId('budget-action')).toHaveText('hold new jobs')
  await expect(budget('tag:tenant=acme').getByTestId('budget-spent')).toHaveText('$1.00 of $1.00 (100%)')
  await expect(budget('tag:tenant=acme')).toHaveClass('budget-over')
  await expect(budget('tag:tenant=acme')).toContainText('spent')
  await expect(budget('tag:tenant=acme').getByTestId('budget-action')).toHaveText('alert only')
  // The providers' limits, their use in the last minute and their queues.
  const prov = (name: string) => page.getByTestId('providers').locator(`tr[data-provider="${name}"]`)
  await expect(page.getByTestId('providers').locator('tbody tr')).toHaveCount(2)
  await expect(prov('anthropic').getByTestId('provider-rpm')).toHaveText('0 of 600')
  await expect(prov('anthropic').getByTestId('provider-input')).toHaveText('0 of 400k')
  await expect(prov('anthropic').getByTestId('provider-output')).toHaveText('0 (no limit)')
  await expect(prov('anthropic').getByTestId('provider-queues')).toHaveText('llm.summarize')
  await expect(prov('anthropic').getByRole('link', { name: 'llm.summarize' })).toHaveAttribute('href', '/ui/queues/llm.summarize')
  await expect(prov('openai').getByTestId('provider-rpm')).toHaveText('0 (no limit)')
  await expect(prov('openai').getByTestId('provider-output')).toHaveText('0 of 50k')
  await expect(prov('openai').getByTestId('provider-queues')).toHaveText('none linked')
  // Spend over time: a point per hour of the last 24, this hour's the spend.
  await expect(page.locator('figure.chart')).toHaveAttribute('data-points', '25')
  // By tag: entered, and kept in the URL.
  await page.getByLabel('Tag key').fill('tenant')
  await page.getByRole('button', { name: 'Show' }).click()
  await expect(page).toHaveURL(/\/ui\/cost\?tag=tenant$/)
  await expect(row('tag', 'acme').locator('td').first()).toHaveText('$1.00')
  await expect(row('tag', 'globex').locator('td').first()).toHaveText('$0.75')
  // Another period keeps the tag.
  await page.getByText('7d', { exact: true }).click()
  await expect(page).toHaveURL(/\/ui\/cost\?period=7d&tag=tenant$/)
  await expect(page.getByTestId('cost-spend')).toHaveText('$1.75')
  await expect(page.locator('figure.chart')).toHaveAttribute('data-points', '169')

  // A model leads to its jobs: the search by model.
  await row('model', model).getByRole('link', { name: model }).click()
  await expect(page).toHaveURL(new RegExp(`/ui/jobs\\?model=${model}$`))
  await expect(page.getByTestId('result-count')).toContainText('3 results')
  // The cost filter, from the form.
  await page.goto('/ui/jobs?min_cost=0.5')
  await expect(page.getByTestId('result-count')).toContainText('2 results')
  await expect(page.locator(`tr[data-job="${summarize[0]}"]`)).toBeVisible()

  // The job pages: the usage panel, the model it fell back to, its
  // scores, and the cached job's source.
  await page.goto(`/ui/jobs/${classify}`)
  await expect(page.getByTestId('usage-cost')).toHaveText('$0.25')
  await expect(page.getByTestId('usage').locator('tbody tr[data-phase]')).toHaveCount(2)
  await expect(page.getByTestId('job-cost')).toContainText('$0.25')
  await expect(page.getByTestId('job-routing')).toHaveText('gpt-4o-mini — model 2 of 2 (fallback_on_error: gpt-4o → gpt-4o-mini), 1 fallback after a provider error')
  const scores = page.getByTestId('scores')
  await expect(scores.locator('tbody tr')).toHaveCount(3)
  await expect(scores.locator('tbody tr').nth(0)).toContainText('accuracy0.92human:ann')
  await expect(scores.locator('tbody tr').nth(1).getByTestId('score-value')).toHaveText('0.85')
  await expect(scores.locator('tbody tr').nth(2)).toContainText('accuracy0.8llm-judge')
  await expect(scores.locator('.stat', { hasText: 'accuracy' }).locator('.stat-value')).toHaveText('0.86')
  // A job nobody scored has no scores panel.
  await page.goto(`/ui/jobs/${summarize[0]}`)
  await expect(page.getByTestId('usage-cost')).toHaveText('$0.75')
  await expect(page.getByTestId('scores')).toHaveCount(0)
  await expect(page.getByTestId('job-routing')).toHaveCount(0)
  await page.goto(`/ui/jobs/${hit.job_id}`)
  await expect(page.getByTestId('job-state')).toHaveText('completed from the result cache')
  await page.getByTestId('cached-from').getByRole('link').click()
  await expect(page).toHaveURL(new RegExp(`/ui/jobs/${summarize[2]}$`))
  await expect(page.getByTestId('usage-cost')).toHaveText('$0.25')
})

// The screenshots in ui/screenshots/ (committed; `make ui-screenshots`
// writes them again, `make ui-e2e` under ui/test-results/): every screen
// at desktop (1440×900) and phone (390×844)
// width, light and dark, from the seeded data above plus a fixed round of
// traffic.
test('screenshots of every screen at desktop and phone width, light and dark', async ({ browser }) => {
  test.setTimeout(300_000)
  mkdirSync(SHOTS, { recursive: true })
  // Something on every screen: dead letters with reasons, a held job
  // waiting on the active one, a schedule, a batch half done.
  const deadIds = await enqueueBatch(['SMTP 550 mailbox unavailable', 'timeout after 30s', 'HTTP 502 from upstream'].map((e, i) => ({ queue: 'emails.send', payload: { to: `bounce${i}@example.org`, error: e }, max_retries: 0 })))
  for (const j of await fetchJobs('emails.send', 'screens-failer', 50)) {
    const i = deadIds.indexOf(j.job_id)
    if (i >= 0) await call('POST', `/api/v1/fail/${j.job_id}`, { error: ['SMTP 550 mailbox unavailable', 'timeout after 30s', 'HTTP 502 from upstream'][i], backtrace: 'at send (mailer.js:42)', worker_id: 'screens-failer' })
    else await call('POST', `/api/v1/ack/${j.job_id}`, { worker_id: 'screens-failer', result: { sent: true } })
  }
  const held = (await call<{ job_id: string }>('POST', '/api/v1/enqueue', { queue: 'publish', payload: { post: 7 }, depends_on: [s.progress_job] })).job_id
  await call('POST', '/api/v1/schedules', { name: 'daily-report', queue: 'reports.generate', cron: '0 9 * * *', timezone: 'America/New_York', payload: { type: 'daily' } })
  const batch = await call<{ job_ids: string[]; batch_id: string }>('POST', '/api/v1/enqueue/batch', {
    jobs: Array.from({ length: 6 }, (_, i) => ({ queue: 'images.resize', payload: { id: i, size: '1024x768' }, max_retries: 0 })),
    batch: { callback_queue: 'images.done', callback_payload: { album: 42 } },
  })
  const resized = await fetchJobs('images.resize', 'screens-resizer', 3)
  for (const [i, j] of resized.entries()) {
    if (i === 2) await call('POST', `/api/v1/fail/${j.job_id}`, { error: 'unsupported format: HEIC', worker_id: 'screens-resizer' })
    else await call('POST', `/api/v1/ack/${j.job_id}`, { worker_id: 'screens-resizer' })
  }
  // A fixed round of traffic (the charts' lines): 40 enqueues of 4, 3
  // fetched each time, 2 acked and 1 failed.
  for (let round = 0; round < 40; round++) {
    await enqueueBatch(Array.from({ length: 4 }, (_, i) => ({ queue: 'emails.send', payload: { to: `t${round}-${i}@example.org` } })))
    for (const [i, j] of (await fetchJobs('emails.send', 'screens-worker', 3)).entries()) {
      if (i === 2) await call('POST', `/api/v1/fail/${j.job_id}`, { error: 'SMTP 451 try later', worker_id: 'screens-worker' })
      else await call('POST', `/api/v1/ack/${j.job_id}`, { worker_id: 'screens-worker' })
    }
    await new Promise((r) => setTimeout(r, 100))
  }
  const screens: [string, string][] = [
    ['dashboard', '/ui/'],
    ['queues', '/ui/queues'],
    ['queue-detail', '/ui/queues/emails.send?state=pending'],
    ['jobs-search', '/ui/jobs?jq=.tier%20%3D%3D%20%22gold%22'],
    ['dead-letters', '/ui/dead'],
    ['held', '/ui/held'],
    ['job-detail', `/ui/jobs/${s.progress_job}`],
    ['job-held', `/ui/jobs/${held}`],
    ['batch', `/ui/batches/${batch.batch_id}`],
    ['workers', '/ui/workers'],
    ['schedules', '/ui/schedules'],
    ['bulk', '/ui/bulk'],
    ['cost', '/ui/cost?tag=tenant'],
    ['job-usage', `/ui/jobs/${usageJobs.classify}`],
    ['job-cached', `/ui/jobs/${usageJobs.cached}`],
    ['cluster', '/ui/cluster'],
    ['audit', '/ui/audit'],
    ['namespaces', '/ui/namespaces'],
    ['not-found', '/ui/nowhere'],
  ]
  for (const [sizeName, viewport] of Object.entries(sizes)) {
    for (const theme of ['light', 'dark'] as const) {
      const ctx = await browser.newContext({ viewport, colorScheme: theme, baseURL: process.env.CORVO_E2E_URL, reducedMotion: 'reduce' })
      const page = await ctx.newPage()
      const suffix = `${sizeName}${theme === 'dark' ? '-dark' : ''}`
      for (const [name, path] of screens) {
        await page.goto(path)
        await page.locator('main h1').first().waitFor()
        await expect(page.locator('main')).not.toContainText('Searching…')
        await expect(page.locator('main')).not.toContainText('Loading…')
        await expect(page.locator('.stat-value', { hasText: '…' })).toHaveCount(0)
        if (name === 'dashboard' || name === 'queue-detail') {
          // The charts load the server's history: wait for its points.
          await expect(page.locator('figure.chart').first()).toHaveAttribute('data-points', /^([4-9]|\d\d+)$/, { timeout: 30_000 })
        }
        if (name === 'job-detail') await expect(page.getByTestId('dependents')).toBeVisible()
        if (name === 'cost') await expect(page.getByTestId('cost-by-tag').locator('tbody tr').first()).toBeVisible()
        if (name === 'cost') await expect(page.getByTestId('budgets').locator('tbody tr').first()).toBeVisible()
        if (name === 'cost') await expect(page.getByTestId('providers').locator('tbody tr').first()).toBeVisible()
        if (name === 'job-usage') await expect(page.getByTestId('scores')).toBeVisible()
        if (name === 'batch') await expect(page.locator('tr[data-job]').first()).toBeVisible()
        // Nothing is wider than the screen (tables scroll inside their box),
        // and a list of jobs fits a phone whole: no column, no row action cut off.
        expect(await page.evaluate(() => document.documentElement.scrollWidth), `${name} at ${sizeName} width`).toBeLessThanOrEqual(viewport.width)
        expect(await page.evaluate(() => [...document.querySelectorAll('.table-wrap')]
          .filter((w) => w.querySelector('table.jobs-table, table.queues-table, table.schedules-table') && w.scrollWidth > w.clientWidth + 1).length), `${name} at ${sizeName} width: a table cut off`).toBe(0)
        // The whole page, up to two screens (three on a phone): a list of 50
        // jobs need not be in the picture whole.
        const height = Math.min(await page.evaluate(() => document.documentElement.scrollHeight), viewport.height * (sizeName === 'phone' ? 3 : 2))
        await page.screenshot({ path: `${SHOTS}/${name}-${suffix}.png`, fullPage: true, clip: { x: 0, y: 0, width: viewport.width, height }, animations: 'disabled', caret: 'hide' })
      }
      // The dialogs and the phone's navigation drawer.
      await page.goto('/ui/queues/emails.send')
      await expect(page.getByTestId('result-count')).toContainText('results')
      await page.getByText(/^Bulk on all/).click()
      await page.getByRole('menuitem', { name: 'Move… all matching' }).click()
      await page.getByRole('dialog').getByTestId('bulk-preview').waitFor()
      await page.screenshot({ path: `${SHOTS}/bulk-confirm-${suffix}.png`, animations: 'disabled', caret: 'hide' })
      await page.keyboard.press('Escape')
      await page.getByRole('button', { name: '+ Enqueue', exact: true }).click()
      await page.getByRole('dialog', { name: 'Enqueue a job' }).waitFor()
      await page.screenshot({ path: `${SHOTS}/enqueue-${suffix}.png`, animations: 'disabled', caret: 'hide' })
      await page.keyboard.press('Escape')
      if (sizeName === 'phone') {
        await page.getByRole('button', { name: 'Open navigation' }).click()
        await page.screenshot({ path: `${SHOTS}/nav-drawer-${suffix}.png`, animations: 'disabled' })
      }
      await ctx.close()
    }
  }
})

test('bulk operations over many jobs show progress', async ({ page }) => {
  // Above the UI's async threshold: the server runs it in the background
  // (when it supports async bulk) and the dialog follows its progress.
  const n = 1500
  for (let i = 0; i < n; i += 500) {
    await enqueueBatch(Array.from({ length: 500 }, (_, k) => ({ queue: 'bulk.many', payload: { k: i + k } })))
  }
  await waitFor('the mirror to see the bulk jobs', async () => (await call<{ total: number }>('POST', '/api/v1/jobs/search', { queue: 'bulk.many', limit: 1 })).total === n)
  await page.goto('/ui/queues/bulk.many')
  await expect(page.getByTestId('result-count')).toContainText(`1,500 results`)
  await page.getByText('Bulk on all 1,500').click()
  await page.getByRole('menuitem', { name: 'Priority… all matching' }).click()
  const dialog = page.getByRole('dialog')
  await dialog.getByLabel('New priority').selectOption('high')
  await dialog.getByTestId('bulk-confirm').click()
  await expect(dialog.getByTestId('bulk-result')).toContainText('1,500 jobs affected', { timeout: 60_000 })
  // It ran as a background operation, which the bulk page lists.
  const ops = await call<{ operations: { id: string; action: string; total: number; status: string }[] }>('GET', '/api/v1/bulk')
  const op = ops.operations.find((o) => o.action === 'change_priority' && o.total === n)
  expect(op?.status).toBe('completed')
  await waitFor('the mirror to see the new priorities', async () => (await call<{ total: number }>('POST', '/api/v1/jobs/search', { queue: 'bulk.many', priority: 'high', limit: 1 })).total === n)
  await dialog.getByRole('button', { name: 'Close' }).click()
  await page.goto('/ui/bulk')
  await expect(page.locator('tr', { hasText: op!.id })).toContainText('completed')
})

test('keyboard: shortcuts move between pages, focus the search, open dialogs; Escape closes them', async ({ page }) => {
  await page.goto('/ui/')
  await expect(page.getByTestId('stat-pending')).not.toHaveText('…')
  await page.keyboard.press('g')
  await page.keyboard.press('x')
  await expect(page).toHaveURL(/\/ui\/dead$/)
  await expect(page.getByRole('heading', { name: 'Dead letters' })).toBeVisible()
  await page.keyboard.press('/')
  await expect(page.getByLabel('Payload contains')).toBeFocused()
  await page.keyboard.type('hook')
  await page.keyboard.press('Enter')
  await expect(page).toHaveURL(/payload=hook/)
  await page.locator('main').click({ position: { x: 5, y: 5 } })
  await page.keyboard.press('n')
  const dialog = page.getByRole('dialog', { name: 'Enqueue a job' })
  await expect(dialog.getByLabel('Queue')).toBeFocused()
  await page.keyboard.press('Escape')
  await expect(dialog).toHaveCount(0)
  // Enqueue from the dialog lands on the new job's page.
  await page.keyboard.press('n')
  await dialog.getByLabel('Queue').fill('ui.enqueued')
  await dialog.getByLabel('Payload (JSON)').fill('{"from": "the dialog"}')
  await dialog.getByRole('button', { name: 'Enqueue' }).click()
  await expect(page).toHaveURL(/\/ui\/jobs\/job_/)
  await expect(page.getByTestId('payload')).toContainText('the dialog')
})

test('dark mode is remembered', async ({ page }) => {
  await page.goto('/ui/')
  await page.getByRole('button', { name: 'Switch to dark mode' }).click()
  await expect(page.locator('html')).toHaveAttribute('data-theme', 'dark')
  await page.reload()
  await expect(page.locator('html')).toHaveAttribute('data-theme', 'dark')
  await page.getByRole('button', { name: 'Switch to light mode' }).click()
  await expect(page.locator('html')).toHaveAttribute('data-theme', 'light')
})

test('live updates arrive over SSE', async ({ page }) => {
  await page.goto('/ui/')
  await expect(page.getByRole('status').filter({ hasText: 'Live' })).toBeVisible()
})

for (const theme of ['light', 'dark'] as const) {
  test(`accessibility: no WCAG 2.1 A/AA violations on any screen or dialog (${theme})`, async ({ browser }) => {
    test.setTimeout(120_000)
    // The axe checker is injected as an inline script, which the UI's
    // Content-Security-Policy (rightly) refuses: this test's browser
    // context bypasses the policy; the CSP test above runs with it.
    const ctx = await browser.newContext({ colorScheme: theme, baseURL: process.env.CORVO_E2E_URL, bypassCSP: true })
    const page = await ctx.newPage()
    const found: string[] = []
    const check = async (where: string) => { for (const v of await axeViolations(page)) found.push(`${where}: ${v}`) }
    for (const path of ['/ui/', '/ui/queues', '/ui/queues/emails.send', '/ui/jobs?state=pending,retrying', '/ui/dead', '/ui/held',
      `/ui/jobs/${s.progress_job}`, `/ui/batches/${batchId}`, '/ui/cost?tag=tenant', `/ui/jobs/${usageJobs.classify}`, `/ui/jobs/${usageJobs.cached}`, '/ui/workers', '/ui/schedules', '/ui/bulk', '/ui/cluster', '/ui/audit', '/ui/namespaces']) {
      await page.goto(path)
      await page.locator('main h1').first().waitFor()
      await expect(page.locator('main')).not.toContainText('Searching…')
      await check(path)
    }
    await page.goto('/ui/queues/emails.send')
    await page.getByText(/^Bulk on all/).click()
    await page.getByRole('menuitem', { name: 'Retry all matching' }).click()
    await page.getByRole('dialog').getByTestId('bulk-preview').waitFor()
    await check('bulk dialog')
    await page.keyboard.press('Escape')
    await page.getByRole('button', { name: '+ Enqueue', exact: true }).click()
    await page.getByRole('dialog', { name: 'Enqueue a job' }).waitFor()
    await check('enqueue dialog')
    await page.keyboard.press('Escape')
    await page.goto('/ui/namespaces')
    await page.getByRole('button', { name: '+ New namespace' }).click()
    await page.getByRole('dialog', { name: 'New namespace' }).waitFor()
    await check('new namespace dialog')
    await ctx.close()
    expect(found, found.join('\n')).toEqual([])
  })
}

