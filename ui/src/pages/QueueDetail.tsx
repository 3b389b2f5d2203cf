import { useState } from 'preact/hooks'
import { api } from '../api'
import { useLive } from '../live'
import { href, navigate } from '../router'
import { fmtNum, fmtRate, fmtQuantiles } from '../format'
import { history, loadHistory, recordQueues } from '../queues'
import { Chart, PALETTE } from '../components/charts'
import { JobSearch } from '../components/JobSearch'
import { EnqueueDialog } from '../components/EnqueueDialog'
import { act, Dialog, ErrorNote } from '../components/ui'
import { PauseButton, QueueSettingsDialog } from './Queues'

export function QueueDetail({ name, query }: { name: string; query: URLSearchParams }) {
  const { data: queues, error, reload } = useLive(async (s) => { const [qs] = await Promise.all([api.queues(s), loadHistory(s)]); recordQueues(qs); return qs }, 'queues', { pollLiveMs: 5000, pollOfflineMs: 2000 })
  const [confirm, setConfirm] = useState<'clear' | 'drain' | 'delete' | null>(null)
  const [limits, setLimits] = useState(false)
  const [enqueue, setEnqueue] = useState(false)
  const q = queues?.find((x) => x.name === name)
  const last = (k: string) => { const c = history.cols.get(k); return c && c.length ? c[c.length - 1] ?? 0 : 0 }

  const doConfirm = async () => {
    const which = confirm
    setConfirm(null)
    if (which === 'clear') await act(`Cleared ${name}`, () => api.clear(name), (r) => `Cleared ${fmtNum((r as { cleared: number }).cleared)} waiting jobs from ${name}`)
    if (which === 'drain') await act(`Draining ${name}`, () => api.drain(name), (r) => `Draining ${name}: paused, ${(r as { active: number }).active} active jobs finishing`)
    if (which === 'delete' && await act(`Deleted ${name}`, () => api.deleteQueue(name))) { navigate('/queues'); return }
    reload()
  }

  return (
    <section aria-labelledby="h-queue">
      <div class="page-head">
        <h1 id="h-queue"><span class="muted">Queue</span> {name}</h1>
        {q && (
          <div class="head-actions">
            <button class="btn small primary" onClick={() => setEnqueue(true)}>+ Enqueue here</button>
            <PauseButton q={q} onDone={reload} />
            <button class="btn small" onClick={() => setConfirm('clear')}>Clear</button>
            <button class="btn small" onClick={() => setConfirm('drain')}>Drain</button>
            <button class="btn small" onClick={() => setLimits(true)}>Limits…</button>
            <button class="btn small danger" onClick={() => setConfirm('delete')}>Delete</button>
          </div>
        )}
      </div>
      <ErrorNote error={error} />
      {queues && !q && <p class="muted">No queue named {name} has jobs or settings yet.</p>}
      {q && (
        <div class="queue-strip" aria-label="Counts">
          <span data-testid="queue-status" class={q.paused ? 'badge s-paused' : 'badge s-active'}>{q.paused ? '‖ paused' : '▶ running'}</span>
          <Count label="pending" value={q.pending} testid="q-pending" state="pending" name={name} />
          <Count label="active" value={q.active} testid="q-active" state="active" name={name} />
          <Count label="scheduled" value={q.scheduled} state="scheduled" name={name} />
          <Count label="retrying" value={q.retrying} state="retrying" name={name} tone={q.retrying ? 'warn' : ''} />
          <Count label="held" value={q.held ?? 0} testid="q-held" state="held" name={name} />
          <Count label="completed" value={q.completed} state="completed" name={name} />
          <Count label="dead" value={q.dead} testid="q-dead" state="dead" name={name} tone={q.dead ? 'bad' : ''} />
          <Count label="cancelled" value={q.cancelled} state="cancelled" name={name} />
          <span class="muted">· {fmtRate(last(`${name}|done`))} · concurrency {q.max_concurrency ?? 'no cap'} · throttle {q.throttle ? `${q.throttle.rate} per ${q.throttle.period}` : 'none'}</span>
          <span class="muted" data-testid="q-wait" title="From runnable to started, over the last 5 minutes">· wait p50/p95/p99 {fmtQuantiles(q.latency?.wait_ms)}</span>
          <span class="muted" data-testid="q-run" title="From started to finished, over the last 5 minutes">· run {fmtQuantiles(q.latency?.run_ms)}</span>
        </div>
      )}
      <h2 class="sr-only">Jobs</h2>
      <JobSearch basePath={`/queues/${encodeURIComponent(name)}`} query={query} fixedQueue={name} collapsible />
      {q && (
        <>
          <h2>Activity</h2>
          <div class="charts two">
            <Chart
              title="Throughput (jobs/s)"
              summary={`${fmtRate(last(`${name}|done`))} completed`}
              series={[{ label: 'enqueued', color: PALETTE[0] }, { label: 'completed', color: PALETTE[1], fill: true }, { label: 'failed', color: PALETTE[2] }]}
              data={history.data([`${name}|enq`, `${name}|done`, `${name}|fail`])}
              height={150}
            />
            <Chart
              title="Depth (jobs)"
              summary={`${q.pending} pending, ${q.active} active`}
              series={[{ label: 'pending', color: PALETTE[0], fill: true }, { label: 'active', color: PALETTE[4] }, { label: 'scheduled+retrying', color: PALETTE[3] }]}
              data={history.data([`${name}|pending`, `${name}|active`, `${name}|waiting`])}
              height={150}
            />
          </div>
        </>
      )}
      {confirm && (
        <Dialog title={confirm === 'clear' ? `Clear ${name}?` : confirm === 'drain' ? `Drain ${name}?` : `Delete ${name}?`} onClose={() => setConfirm(null)}>
          <p>
            {confirm === 'clear' && <>Every pending, scheduled and retrying job of <strong>{name}</strong> ({fmtNum((q?.pending ?? 0) + (q?.scheduled ?? 0) + (q?.retrying ?? 0))}) is deleted. Active jobs finish.</>}
            {confirm === 'drain' && <>The queue is paused so its {q?.active ?? 0} active jobs finish and no new ones start. Resume it afterwards.</>}
            {confirm === 'delete' && <>The queue, its settings and <strong>every one of its jobs</strong> are deleted.</>}
          </p>
          {confirm !== 'drain' && <p class="warn">⚠ This action cannot be undone.</p>}
          <div class="dialog-actions">
            <button class="btn" onClick={() => setConfirm(null)}>Cancel</button>
            <button class={`btn ${confirm === 'drain' ? 'primary' : 'danger'}`} onClick={doConfirm} autoFocus>{confirm === 'clear' ? 'Clear' : confirm === 'drain' ? 'Drain' : 'Delete queue'}</button>
          </div>
        </Dialog>
      )}
      {enqueue && <EnqueueDialog queue={name} onClose={() => setEnqueue(false)} />}
      {limits && q && <QueueSettingsDialog q={q} onClose={() => { setLimits(false); reload() }} />}
    </section>
  )
}

// Count is one of the queue's counts; it filters the list below by its state.
function Count({ label, value, state, name, testid, tone }: { label: string; value: number; state: string; name: string; testid?: string; tone?: string }) {
  return (
    <a class={`count ${tone ?? ''}`} href={href(`/queues/${encodeURIComponent(name)}`, `state=${state}`)}>
      <strong data-testid={testid}>{fmtNum(value)}</strong> {label}
    </a>
  )
}
