// Seeding and driving a server through its HTTP API, as a producer and a
// worker would.
export const url = () => {
  const u = process.env.CORVO_E2E_URL
  if (!u) throw new Error('CORVO_E2E_URL is not set (global setup did not run)')
  return u
}

export async function call<T = any>(method: string, path: string, body?: unknown): Promise<T> {
  const r = await fetch(url() + path, {
    method,
    headers: method === 'GET' ? {} : { 'Content-Type': 'application/json' }, // the server wants it on every POST/PUT
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  const text = await r.text()
  if (!r.ok && r.status !== 204) throw new Error(`${method} ${path}: ${r.status} ${text}`)
  return (text ? JSON.parse(text) : null) as T
}

export async function enqueueBatch(jobs: Record<string, unknown>[]): Promise<string[]> {
  const r = await call<{ job_ids: string[] }>('POST', '/api/v1/enqueue/batch', { jobs })
  return r.job_ids
}

export async function fetchJobs(queue: string, worker: string, count: number): Promise<{ job_id: string }[]> {
  const r = await call<{ jobs: { job_id: string }[] } | null>('POST', '/api/v1/fetch', { queues: [queue], worker_id: worker, hostname: 'e2e-host', count, timeout: 0 })
  return r?.jobs ?? []
}

// waitFor polls f until it returns a truthy value (the mirror trails
// commits by milliseconds).
export async function waitFor<T>(what: string, f: () => Promise<T | null | undefined | false>, ms = 10_000): Promise<T> {
  const deadline = Date.now() + ms
  let last: unknown
  for (;;) {
    try {
      const v = await f()
      if (v) return v
    } catch (e) { last = e }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${last ? ': ' + String(last) : ''}`)
    await new Promise((r) => setTimeout(r, 50))
  }
}

export interface Seeded {
  pending: number
  active: number
  dead: number
  scheduled: number
  queues: string[]
  dead_ids: string[]
  gold_big: string[] // jobs whose payload matches .tier == "gold" and .amount > 100
  progress_job: string
  worker: string
}

// seed makes a known set of jobs: pending ones in several queues, dead
// ones, a scheduled one and one active job held by a worker.
export async function seed(): Promise<Seeded> {
  const orders: Record<string, unknown>[] = []
  for (let i = 0; i < 30; i++) {
    orders.push({ queue: 'orders.charge', payload: { order: i, tier: i % 3 === 0 ? 'gold' : 'basic', amount: i * 10, email: `user${i}@example.com` }, tags: { tenant: i % 2 ? 'acme' : 'globex' } })
  }
  const ids = await enqueueBatch(orders)
  const gold_big = ids.filter((_, i) => i % 3 === 0 && i * 10 > 100)
  await enqueueBatch(Array.from({ length: 12 }, (_, i) => ({ queue: 'emails.send', payload: { to: `person${i}@example.org`, template: i % 2 ? 'welcome' : 'reset' }, priority: i < 2 ? 'high' : 'normal' })))
  await enqueueBatch(Array.from({ length: 5 }, (_, i) => ({ queue: 'reports.generate', payload: { report: `r${i}` } })))
  await call('POST', '/api/v1/enqueue', { queue: 'reports.generate', payload: { report: 'later' }, scheduled_at: '2099-01-01T00:00:00Z' })
  // Dead letters: no retries, fetched and failed.
  const dead_ids = await enqueueBatch(Array.from({ length: 4 }, (_, i) => ({ queue: 'webhooks.deliver', payload: { hook: i }, max_retries: 0 })))
  const got = await fetchJobs('webhooks.deliver', 'e2e-failer', 4)
  if (got.length !== 4) throw new Error(`fetched ${got.length} of 4 webhook jobs`)
  for (const j of got) await call('POST', `/api/v1/fail/${j.job_id}`, { error: 'HTTP 502 from https://hooks.example.com', worker_id: 'e2e-failer' })
  // One job being worked on.
  const [pj] = await enqueueBatch([{ queue: 'video.encode', payload: { file: 'movie.mp4' }, lease_duration: 600 }])
  const [leased] = await fetchJobs('video.encode', 'e2e-encoder', 1)
  if (leased?.job_id !== pj) throw new Error('did not lease the video job')
  // Let the mirror catch up with everything above.
  await waitFor('the mirror to see the seeded jobs', async () => {
    const r = await call<{ total: number }>('POST', '/api/v1/jobs/search', { limit: 1 })
    return r.total === 30 + 12 + 5 + 1 + 4 + 1
  })
  return {
    pending: 30 + 12 + 5, active: 1, dead: 4, scheduled: 1,
    queues: ['orders.charge', 'emails.send', 'reports.generate', 'webhooks.deliver', 'video.encode'],
    dead_ids, gold_big, progress_job: pj, worker: 'e2e-encoder',
  }
}

export async function heartbeat(worker: string, job: string, progress: unknown) {
  return call('POST', '/api/v1/heartbeat', { worker_id: worker, jobs: { [job]: { progress } } })
}
