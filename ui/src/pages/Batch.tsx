// A batch (POST /api/v1/enqueue/batch with "batch"): its counts, its
// callback and its members, searched by batch_id with the usual filters,
// paging and bulk actions.
import { api, ApiError, type Batch } from '../api'
import { useLive } from '../live'
import { href } from '../router'
import { fmtNum, fmtTime, pretty } from '../format'
import { JobSearch } from '../components/JobSearch'
import { ErrorNote, ProgressBar, StateBadge } from '../components/ui'

// batchCounts says a batch's progress in the words of its page: the
// members finished (succeeded or failed) of the total, and whether the
// callback is due.
export function batchCounts(b: Batch): { finished: number; text: string; done: boolean } {
  const finished = b.succeeded + b.failed
  const done = finished >= b.total
  const parts = [`${fmtNum(finished)} of ${fmtNum(b.total)} finished`]
  if (b.failed) parts.push(`${fmtNum(b.failed)} failed`)
  if (!done) parts.push(`${fmtNum(b.total - finished)} to go`)
  return { finished, text: parts.join(', '), done }
}

// The progress bar says the counts already (3 / 6): its note is the rest.
function progressNote(b: Batch, done: boolean): string {
  const parts: string[] = []
  if (b.failed) parts.push(`${fmtNum(b.failed)} failed`)
  if (!done) parts.push(`${fmtNum(b.total - b.succeeded - b.failed)} to go`)
  return parts.join(', ')
}

export function BatchPage({ id, query }: { id: string; query: URLSearchParams }) {
  const { data: b, error } = useLive<Batch>((s) => api.batch(id, s), 'batch:' + id, { minGapMs: 1500, pollLiveMs: 10_000, pollOfflineMs: 3000 })
  if (error && (error as ApiError).status === 404) {
    return <section><h1>Batch not found</h1><p>No batch <span class="mono">{id}</span>: it was never created, or its jobs were restored under a new one.</p></section>
  }
  const base = `/batches/${encodeURIComponent(id)}`
  const c = b && batchCounts(b)
  return (
    <section aria-labelledby="h-batch">
      <div class="page-head">
        <h1 id="h-batch"><span class="muted">Batch</span> <span class="mono break">{id}</span></h1>
      </div>
      <ErrorNote error={error} />
      {b && c && (
        <>
          <div class="queue-strip" aria-label="Counts" data-testid="batch-counts">
            <span class={`badge ${c.done ? 's-completed' : 's-active'}`}>{c.done ? 'finished' : 'running'}</span>
            <a class="count" href={href(base)}><strong data-testid="batch-total">{fmtNum(b.total)}</strong> jobs</a>
            <a class="count" href={href(base, 'state=pending,active,scheduled,retrying,held')}><strong data-testid="batch-pending">{fmtNum(b.pending)}</strong> pending</a>
            <a class="count" href={href(base, 'state=completed')}><strong data-testid="batch-succeeded">{fmtNum(b.succeeded)}</strong> succeeded</a>
            <a class={`count ${b.failed ? 'bad' : ''}`} href={href(base, 'state=dead,cancelled')}><strong data-testid="batch-failed">{fmtNum(b.failed)}</strong> failed</a>
          </div>
          <ProgressBar progress={{ current: c.finished, total: b.total, message: progressNote(b, c.done) || undefined }} label={`Batch progress: ${c.text}`} />
          <dl class="facts">
            <dt>Created</dt><dd>{fmtTime(b.created_at)}</dd>
            <dt>Finished</dt><dd>{b.completed_at ? fmtTime(b.completed_at) : <span class="muted">not yet</span>}</dd>
            <dt>Callback queue</dt><dd><a href={href(`/queues/${encodeURIComponent(b.callback_queue)}`)}>{b.callback_queue}</a></dd>
            <dt>Callback job</dt>
            <dd data-testid="batch-callback">
              {b.callback_job_id
                ? <CallbackJob id={b.callback_job_id} />
                : <span class="muted">enqueued on {b.callback_queue} once every job has finished</span>}
            </dd>
            {b.callback_payload !== undefined && b.callback_payload !== null && (
              <><dt>Callback payload</dt><dd><pre class="code small-code" tabIndex={0}>{pretty(b.callback_payload)}</pre></dd></>
            )}
          </dl>
        </>
      )}
      <h2>Jobs</h2>
      <JobSearch basePath={base} query={query} fixedBatch={id} collapsible />
    </section>
  )
}

function CallbackJob({ id }: { id: string }) {
  const { data } = useLive((s) => api.job(id, s).then((j) => j.state as string, () => null), 'job-state:' + id, { match: (e) => e.job_id === id, minGapMs: 1000 })
  return (
    <>
      <a class="mono" href={href(`/jobs/${encodeURIComponent(id)}`)}>{id}</a>
      {data && <> <StateBadge state={data} /></>}
    </>
  )
}
