import { useState } from 'preact/hooks'
import { api, ApiError, PRIORITIES, type Job, type Priority, type SearchPage, type TimelineEntry } from '../api'
import { useLive, type JobEvent } from '../live'
import { href, navigate } from '../router'
import { fmtAttempt, fmtClock, fmtDuration, fmtNum, fmtTime, fmtUSD, pretty, routeNote, shortId } from '../format'
import { act, Dialog, ErrorNote, ProgressBar, StateBadge } from '../components/ui'
import { lazy } from '../components/lazy'

// The usage and scores panels are a chunk of their own: most jobs have
// no usage and are never scored.
const UsagePanel = lazy(() => import('../components/UsagePanel').then((m) => m.UsagePanel))
const ScoresPanel = lazy(() => import('../components/UsagePanel').then((m) => m.ScoresPanel))

// timelineOf gives the server's timeline when it has one, else one
// reconstructed from the job's own fields (less detailed: no progress).
export function timelineOf(j: Job): TimelineEntry[] {
  if (j.timeline && j.timeline.length) return j.timeline
  const t: TimelineEntry[] = [{ at: j.created_at, type: j.scheduled_at && j.scheduled_at > j.created_at ? 'scheduled' : 'enqueued' }]
  for (const e of j.errors) t.push({ at: e.at, type: 'failed', attempt: e.attempt, detail: e.error })
  if (j.started_at) t.push({ at: j.started_at, type: 'started', attempt: j.attempt, worker_id: j.worker?.id })
  if (j.completed_at) t.push({ at: j.completed_at, type: j.state === 'completed' ? 'completed' : j.state, detail: j.reason ?? undefined })
  return t.sort((a, b) => a.at.localeCompare(b.at))
}

function describeEntry(e: TimelineEntry): string {
  const parts = [e.type]
  if (e.type === 'started' && e.worker_id) parts.push(`by ${e.worker_id}`)
  if (e.attempt && e.type !== 'enqueued') parts.push(`(attempt ${e.attempt})`)
  if (e.detail) parts.push(e.type === 'failed' ? `: ${e.detail}` : `— ${e.detail}`)
  return parts.join(' ').replace(' :', ':')
}

// attemptsOf pairs each attempt's start with its end, from the timeline
// when it has starts, else from the error list.
export function attemptsOf(j: Job): { n: number; started: string | null; duration: number | null; result: string }[] {
  const tl = timelineOf(j)
  const starts = tl.filter((e) => e.type === 'started')
  const out: { n: number; started: string | null; duration: number | null; result: string }[] = []
  const max = Math.max(j.attempt, ...j.errors.map((e) => e.attempt), 0)
  for (let n = 1; n <= max; n++) {
    const s = starts.find((e) => e.attempt === n) ?? (n === j.attempt && j.started_at ? { at: j.started_at } as TimelineEntry : undefined)
    const err = j.errors.find((e) => e.attempt === n)
    let result: string
    let end: string | null = null
    if (err) { result = err.error; end = err.at }
    else if (n === j.attempt) {
      result = j.state === 'active' ? 'running' : j.state === 'completed' ? 'completed' : j.state
      end = j.state === 'active' ? null : j.completed_at
    } else result = '—'
    const started = s?.at ?? null
    out.push({ n, started, duration: started && end ? Date.parse(end) - Date.parse(started) : started && j.state === 'active' && n === j.attempt ? Date.now() - Date.parse(started) : null, result })
  }
  return out
}

export function JobDetail({ id }: { id: string }) {
  const [liveProgress, setLiveProgress] = useState<JobEvent['progress'] | null>(null)
  const [dialog, setDialog] = useState<'move' | 'delete' | 'priority' | null>(null)
  const { data: j, error, reload } = useLive<Job>(
    async (s) => { const r = await api.job(id, s); setLiveProgress(null); return r },
    'job:' + id,
    {
      match: (e) => e.job_id === id,
      onEvent: (e) => {
        if (e.job_id !== id) return
        if (e.type === 'progress' && e.progress) setLiveProgress(e.progress)
        // Moved to a queue on another shard: the job lives on under a new id.
        if (e.type === 'moved' && e.moved_to && e.moved_to !== id) navigate(`/jobs/${encodeURIComponent(e.moved_to)}`, { replace: true })
      },
      minGapMs: 500, pollLiveMs: 10_000, pollOfflineMs: 1500,
    },
  )

  if (error && (error as ApiError).status === 404) {
    return <section><h1>Job not found</h1><p>No job <span class="mono">{id}</span>: it was deleted, purged after its retention, or never existed.</p></section>
  }
  const finished = j && ['completed', 'dead', 'cancelled'].includes(j.state)
  const progress = liveProgress ?? j?.progress
  const run = async (label: string, f: () => Promise<unknown>) => { await act(label, f); reload() }

  return (
    <section aria-labelledby="h-job">
      <div class="page-head">
        <h1 id="h-job"><span class="muted">Job</span> <span class="mono break">{id}</span></h1>
        {j && (
          <div class="head-actions">
            {finished && <button class="btn small primary" onClick={() => run('Retried', () => api.retry(id))}>Retry</button>}
            {j.state === 'held' && <button class="btn small primary" onClick={() => run('Approved', () => api.approve(id))}>Approve</button>}
            {j.state === 'held' && <button class="btn small danger" onClick={() => run('Rejected', () => api.reject(id))}>Reject</button>}
            {!finished && <button class="btn small" onClick={() => run('Cancel requested', () => api.cancel(id))}>Cancel</button>}
            {(j.state === 'pending' || j.state === 'scheduled') && <button class="btn small" onClick={() => setDialog('priority')}>Priority…</button>}
            {j.state !== 'active' && <button class="btn small" onClick={() => setDialog('move')}>Move…</button>}
            <button class="btn small danger" onClick={() => setDialog('delete')}>Delete</button>
          </div>
        )}
      </div>
      <ErrorNote error={error} />
      {j && (
        <>
          <dl class="facts">
            <dt>Queue</dt><dd><a href={href(`/queues/${encodeURIComponent(j.queue)}`)}>{j.queue}</a></dd>
            <dt>State</dt><dd data-testid="job-state"><StateBadge state={j.state} /> {j.cached_from && j.attempt === 0 ? 'from the result cache' : fmtAttempt(j.attempt, j.max_retries)}{j.cancel_requested ? ' · cancel requested' : ''}{j.reason ? ` · ${j.reason}` : ''}</dd>
            <dt>Priority</dt><dd>{j.priority}</dd>
            {j.worker && <><dt>Worker</dt><dd>{j.worker.id}{j.worker.hostname ? ` on ${j.worker.hostname}` : ''}</dd></>}
            <dt>Created</dt><dd>{fmtTime(j.created_at)}</dd>
            {j.scheduled_at && <><dt>Scheduled</dt><dd>{fmtTime(j.scheduled_at)}</dd></>}
            {j.started_at && <><dt>Started</dt><dd>{fmtTime(j.started_at)} <span class="muted">({fmtDuration(Date.parse(j.started_at) - Date.parse(j.scheduled_at ?? j.created_at))} queue time)</span></dd></>}
            {j.completed_at && <><dt>Finished</dt><dd>{fmtTime(j.completed_at)}</dd></>}
            {j.lease_expires_at && <><dt>Lease until</dt><dd>{fmtTime(j.lease_expires_at)}</dd></>}
            {j.expire_at && <><dt>Expires</dt><dd>{fmtTime(j.expire_at)}</dd></>}
            <dt>Retries</dt><dd>{j.retry_backoff} backoff, {j.retry_base_delay} → {j.retry_max_delay}, {j.attempts_remaining} left</dd>
            {j.unique_key && <><dt>Unique key</dt><dd class="mono">{j.unique_key}</dd></>}
            {Object.keys(j.tags).length > 0 && <><dt>Tags</dt><dd>{Object.entries(j.tags).map(([k, v]) => <span class="tag" key={k}>{k}:{v}</span>)}</dd></>}
            {j.depends_on && j.depends_on.length > 0 && <><dt>Depends on</dt><dd><Dependencies ids={j.depends_on} done={j.dependencies_done ?? 0} /></dd></>}
            <Dependents id={j.id} />
            {j.batch_id && <><dt>Batch</dt><dd><BatchInfo id={j.batch_id} /></dd></>}
            {j.chain_id && <><dt>Chain</dt><dd class="mono">{j.chain_id} · step {j.chain_step}</dd></>}
            {j.cached_from && (
              <><dt>Cached from</dt><dd data-testid="cached-from">
                <a class="mono" href={href(`/jobs/${encodeURIComponent(j.cached_from)}`)} title={j.cached_from}>{shortId(j.cached_from)}</a>
                <span class="muted"> — its result, from the cache: this job never reached a worker</span>
              </dd></>
            )}
            {j.cache_key && !j.cached_from && <><dt>Result cache</dt><dd><span class="muted">key</span> <span class="mono" title={j.cache_key}>{j.cache_key.slice(0, 16)}…</span></dd></>}
            {j.routing && (
              <><dt>Model</dt><dd data-testid="job-routing">
                <span class="mono">{j.routing.target}</span> <span class="muted">— {routeNote(j.routing)}</span>
              </dd></>
            )}
            {j.usage && <><dt>Cost</dt><dd data-testid="job-cost">{fmtUSD(j.usage.cost_usd)} <span class="muted">({fmtNum(j.usage.input_tokens)} tokens in, {fmtNum(j.usage.output_tokens)} out)</span></dd></>}
          </dl>

          {progress && (
            <div class="block">
              <h2>Progress</h2>
              <ProgressBar progress={progress} label="Job progress" />
            </div>
          )}

          {j.usage && <UsagePanel usage={j.usage} />}
          {j.scores && j.scores.length > 0 && <ScoresPanel scores={j.scores} />}

          <div class="block">
            <h2>Payload</h2>
            <pre class="code" data-testid="payload" tabIndex={0}>{pretty(j.payload)}</pre>
          </div>
          {j.result !== null && j.result !== undefined && <div class="block"><h2>Result</h2><pre class="code" tabIndex={0}>{pretty(j.result)}</pre></div>}
          {j.checkpoint !== null && j.checkpoint !== undefined && <div class="block"><h2>Checkpoint</h2><pre class="code" tabIndex={0}>{pretty(j.checkpoint)}</pre></div>}

          <div class="block">
            <h2>Attempt history</h2>
            {j.attempt === 0 && j.errors.length === 0 ? <p class="muted">{j.cached_from ? 'Never ran: completed with the result of the job it was cached from.' : 'Not run yet.'}</p> : (
              <div class="table-wrap">
                <table class="grid">
                  <thead><tr><th scope="col">#</th><th scope="col">Started</th><th scope="col">Duration</th><th scope="col">Result</th></tr></thead>
                  <tbody>
                    {attemptsOf(j).map((a) => (
                      <tr key={a.n}><td>{a.n}</td><td>{a.started ? fmtClock(a.started) : '—'}</td><td>{a.duration === null ? '…' : fmtDuration(a.duration)}</td><td class={a.result === 'running' || a.result === 'completed' ? '' : 'err'}>{a.result}</td></tr>
                    ))}
                  </tbody>
                </table>
              </div>
            )}
            {j.errors.some((e) => e.backtrace) && (
              <details><summary>Backtraces</summary>
                {j.errors.filter((e) => e.backtrace).map((e) => <div key={e.attempt}><h3>Attempt {e.attempt}</h3><pre class="code">{e.backtrace}</pre></div>)}
              </details>
            )}
          </div>

          <div class="block">
            <h2>Timeline</h2>
            <ol class="timeline" data-testid="timeline">
              {timelineOf(j).map((e, i) => (
                <li key={i} class={`t-${e.type}`}><time dateTime={e.at} title={e.at}>{fmtClock(e.at)}</time><span>{describeEntry(e)}</span></li>
              ))}
            </ol>
          </div>
        </>
      )}
      {dialog === 'move' && j && <MoveDialog job={j} onClose={() => { setDialog(null); reload() }} />}
      {dialog === 'priority' && j && <PriorityDialog job={j} onClose={() => { setDialog(null); reload() }} />}
      {dialog === 'delete' && j && (
        <Dialog title="Delete this job?" onClose={() => setDialog(null)}>
          <p>The job and its whole history are deleted. A worker holding it gets 404 on ack.</p>
          <p class="warn">⚠ This action cannot be undone.</p>
          <div class="dialog-actions">
            <button class="btn" onClick={() => setDialog(null)}>Cancel</button>
            <button class="btn danger" autoFocus onClick={async () => { setDialog(null); if (await act('Deleted', () => api.deleteJob(id))) navigate(`/queues/${encodeURIComponent(j.queue)}`) }}>Delete job</button>
          </div>
        </Dialog>
      )}
    </section>
  )
}

// Dependencies names and links the jobs a job waits for, with the state of
// each (the first 20 are looked up).
const DEP_LOOKUPS = 20
export function Dependencies({ ids, done }: { ids: string[]; done: number }) {
  const { data } = useLive(
    (s) => Promise.all(ids.slice(0, DEP_LOOKUPS).map((id) => api.job(id, s).then((j) => j.state as string, (e) => ((e as ApiError).status === 404 ? 'deleted' : '?')))),
    'deps:' + ids.join(','),
    { match: (e) => !!e.job_id && ids.includes(e.job_id), minGapMs: 1000, pollLiveMs: 15_000, pollOfflineMs: 5000 },
  )
  return (
    <div data-testid="dependencies">
      <span class="muted">{done} of {ids.length} completed</span>
      <ul class="deps">
        {ids.map((id, i) => (
          <li key={id}>
            <a class="mono" href={href(`/jobs/${encodeURIComponent(id)}`)} title={id}>{shortId(id)}</a>
            {data && i < data.length && <> <StateBadge state={data[i]} /></>}
          </li>
        ))}
      </ul>
    </div>
  )
}

// Dependents names and links the jobs that wait on this one (enqueued
// with it in their depends_on): the first CHILD_LOOKUPS, and a search for
// all of them. Nothing when none do (or the server cannot tell).
export const CHILD_LOOKUPS = 20
export function Dependents({ id }: { id: string }) {
  const { data } = useLive<SearchPage | null>(
    (s) => api.search({ depends_on: id, sort: 'created_at', order: 'asc', limit: CHILD_LOOKUPS }, s).catch(() => null),
    'children:' + id,
    { match: (e): boolean => e.job_id === id || !!data?.jobs.some((c) => c.id === e.job_id), minGapMs: 1000, pollLiveMs: 20_000, pollOfflineMs: 5000 },
  )
  if (!data || data.total === 0) return null
  return (
    <>
      <dt>Waited on by</dt>
      <dd data-testid="dependents">
        <span class="muted">{data.total === 1 ? '1 job' : `${fmtNum(data.total)} jobs`}</span>
        <ul class="deps">
          {data.jobs.map((c) => (
            <li key={c.id}><a class="mono" href={href(`/jobs/${encodeURIComponent(c.id)}`)} title={c.id}>{shortId(c.id)}</a> <StateBadge state={c.state} /></li>
          ))}
          {data.has_more && <li><a href={href('/jobs', `depends_on=${encodeURIComponent(id)}`)}>all {fmtNum(data.total)} →</a></li>}
        </ul>
      </dd>
    </>
  )
}

function BatchInfo({ id }: { id: string }) {
  const { data } = useLive((s) => api.batch(id, s), 'batch:' + id, { minGapMs: 2000, pollLiveMs: 15_000, pollOfflineMs: 5000 })
  return (
    <span data-testid="job-batch">
      <a class="mono" href={href(`/batches/${encodeURIComponent(id)}`)}>{id}</a>
      {data && <span class="muted"> ({data.succeeded + data.failed} of {data.total} finished{data.failed ? `, ${data.failed} failed` : ''}{data.callback_job_id ? <>; callback <a href={href(`/jobs/${encodeURIComponent(data.callback_job_id)}`)} class="mono">{shortId(data.callback_job_id)}</a></> : ''})</span>}
    </span>
  )
}

export function MoveDialog({ job, onClose }: { job: Job; onClose: () => void }) {
  const [queue, setQueue] = useState('')
  const [reset, setReset] = useState(true)
  // The spec's dialog: "Keep current priority" (off: the job takes the
  // priority chosen here, normal unless changed).
  const [keep, setKeep] = useState(false)
  const [prio, setPrio] = useState<Priority>('normal')
  const [busy, setBusy] = useState(false)
  const { data: queues } = useLive((s) => api.queues(s), 'move-queues', { match: () => false })
  const submit = async (e: Event) => {
    e.preventDefault()
    setBusy(true)
    try {
      const r = await api.move(job.id, queue.trim(), reset, keep ? undefined : prio)
      onClose()
      act(`Moved to ${r.queue}`, async () => r)
      if (r.job_id !== job.id) navigate(`/jobs/${encodeURIComponent(r.job_id)}`, { replace: true })
    } catch (x) {
      act('Move', () => Promise.reject(x))
      setBusy(false)
    }
  }
  return (
    <Dialog title="Move job to queue" onClose={onClose}>
      <form class="form" onSubmit={submit}>
        <p>Current queue: <strong>{job.queue}</strong></p>
        <label>Target queue
          <input required list="queue-names" value={queue} onInput={(e) => setQueue((e.target as HTMLInputElement).value)} autoFocus placeholder="emails.legacy" />
          <datalist id="queue-names">{(queues ?? []).filter((q) => q.name !== job.queue).map((q) => <option key={q.name} value={q.name} />)}</datalist>
        </label>
        <label class="check-label"><input type="checkbox" checked={reset} onChange={() => setReset(!reset)} /> Reset attempt counter</label>
        <label class="check-label"><input type="checkbox" checked={keep} onChange={() => setKeep(!keep)} /> Keep current priority ({job.priority})</label>
        {!keep && (
          <label>New priority
            <select value={prio} onChange={(e) => setPrio((e.target as HTMLSelectElement).value as Priority)}>
              {PRIORITIES.map((x) => <option key={x} value={x}>{x}</option>)}
            </select>
          </label>
        )}
        <div class="dialog-actions">
          <button type="button" class="btn" onClick={onClose}>Cancel</button>
          <button type="submit" class="btn primary" disabled={busy || !queue.trim() || queue.trim() === job.queue}>Move</button>
        </div>
      </form>
    </Dialog>
  )
}

function PriorityDialog({ job, onClose }: { job: Job; onClose: () => void }) {
  const [p, setP] = useState<Priority>(job.priority)
  const submit = async (e: Event) => {
    e.preventDefault()
    await act(`Priority set to ${p}`, async () => {
      const r = await api.bulk({ job_ids: [job.id], action: 'change_priority', priority: p })
      if ('errors' in r && r.errors > 0) throw new Error(r.failed?.[0]?.error ?? 'not applied')
      return r
    })
    onClose()
  }
  return (
    <Dialog title="Change priority" onClose={onClose}>
      <form class="form" onSubmit={submit}>
        <label>Priority
          <select value={p} onChange={(e) => setP((e.target as HTMLSelectElement).value as Priority)} autoFocus>
            {PRIORITIES.map((x) => <option key={x} value={x}>{x}</option>)}
          </select>
        </label>
        <div class="dialog-actions">
          <button type="button" class="btn" onClick={onClose}>Cancel</button>
          <button type="submit" class="btn primary">Save</button>
        </div>
      </form>
    </Dialog>
  )
}
