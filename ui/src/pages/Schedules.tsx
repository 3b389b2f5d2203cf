import { useState } from 'preact/hooks'
import { api, PRIORITIES, type Schedule } from '../api'
import { useLive } from '../live'
import { href } from '../router'
import { fmtAgo, fmtTime, preview, shortId } from '../format'
import { act, Dialog, Empty, ErrorNote } from '../components/ui'

export function SchedulesPage() {
  const { data, error, reload } = useLive((s) => api.schedules(s), 'schedules', { match: (e) => e.type === 'scheduled', pollLiveMs: 15_000, pollOfflineMs: 5000 })
  const [creating, setCreating] = useState(false)
  const [editing, setEditing] = useState<Schedule | null>(null)
  const [deleting, setDeleting] = useState<Schedule | null>(null)
  const runNow = async (s: Schedule) => {
    await act(`Ran ${s.name}`, () => api.runSchedule(s.id), (r) => `Ran ${s.name}: job ${shortId((r as { job_id: string }).job_id)}`)
    reload()
  }
  const togglePause = async (s: Schedule) => {
    await act(s.paused ? `Resumed ${s.name}` : `Paused ${s.name}`, () => (s.paused ? api.resumeSchedule(s.id) : api.pauseSchedule(s.id)))
    reload()
  }
  return (
    <section aria-labelledby="h-sched">
      <div class="page-head">
        <h1 id="h-sched">Schedules</h1>
        <button class="btn primary small" onClick={() => setCreating(true)}>+ New schedule</button>
      </div>
      <ErrorNote error={error} />
      {data && (data.length ? (
        <div class="table-wrap">
          <table class="grid schedules-table">
            <thead><tr><th scope="col">Name</th><th scope="col">Cron</th><th scope="col" class="hide-xs">Queue</th><th scope="col">Next run</th><th scope="col" class="hide-sm">Last run</th><th scope="col" class="hide-sm">Payload</th><th scope="col"><span class="sr-only">Actions</span></th></tr></thead>
            <tbody>
              {data.map((s) => (
                <tr key={s.id} data-schedule={s.name} class={s.paused ? 'paused' : ''}>
                  <th scope="row">{s.name}{s.paused && <span class="badge s-paused" data-testid="schedule-paused">paused</span>}</th>
                  <td class="mono" title={s.timezone}>{s.cron} <span class="muted small hide-xs">{s.timezone}</span></td>
                  <td class="hide-xs"><a href={href(`/queues/${encodeURIComponent(s.queue)}`)}>{s.queue}</a></td>
                  <td title={s.next_run ? fmtTime(s.next_run) : ''}>{s.paused ? <span class="muted">paused</span> : s.next_run ? <><span class="hide-sm">{fmtTime(s.next_run)} (</span>{fmtAgo(s.next_run)}<span class="hide-sm">)</span></> : '—'}</td>
                  <td class="hide-sm" title={s.last_run ? fmtTime(s.last_run) : undefined}>
                    {fmtAgo(s.last_run)}
                    {s.last_job_id && <> · <a class="mono" data-testid="last-job" href={href(`/jobs/${encodeURIComponent(s.last_job_id)}`)} title={s.last_job_id}>{shortId(s.last_job_id)}</a></>}
                  </td>
                  <td class="mono muted small hide-sm">{preview(s.payload, 40)}</td>
                  <td class="actions">
                    <button class="btn small" aria-label={`Run now: schedule ${s.name}`} onClick={() => runNow(s)}>Run now</button>{' '}
                    <button class="btn small" aria-label={`${s.paused ? 'Resume' : 'Pause'} schedule ${s.name}`} onClick={() => togglePause(s)}>{s.paused ? '▶ Resume' : '‖ Pause'}</button>{' '}
                    <button class="btn small" aria-label={`Edit schedule ${s.name}`} onClick={() => setEditing(s)}>Edit</button>{' '}
                    <button class="btn small danger" aria-label={`Delete schedule ${s.name}`} onClick={() => setDeleting(s)}>Delete</button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      ) : <Empty>No schedules. A schedule enqueues a job on a cron expression.</Empty>)}
      {creating && <ScheduleDialog onClose={() => { setCreating(false); reload() }} />}
      {editing && <ScheduleDialog editing={editing} onClose={() => { setEditing(null); reload() }} />}
      {deleting && (
        <Dialog title={`Delete schedule ${deleting.name}?`} onClose={() => setDeleting(null)}>
          <p>No more jobs are enqueued by it; jobs it already enqueued stay.</p>
          <div class="dialog-actions">
            <button class="btn" onClick={() => setDeleting(null)}>Cancel</button>
            <button class="btn danger" autoFocus onClick={async () => { const s = deleting; setDeleting(null); await act(`Deleted ${s.name}`, () => api.deleteSchedule(s.id)); reload() }}>Delete</button>
          </div>
        </Dialog>
      )}
    </section>
  )
}

function ScheduleDialog({ onClose, editing }: { onClose: () => void; editing?: Schedule }) {
  const [f, setF] = useState(editing
    ? { name: editing.name, queue: editing.queue, cron: editing.cron, timezone: editing.timezone, payload: JSON.stringify(editing.payload ?? {}, null, 2), priority: editing.priority ?? 'normal' }
    : { name: '', queue: '', cron: '0 9 * * *', timezone: Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC', payload: '{}', priority: 'normal' })
  const [err, setErr] = useState<string | null>(null)
  const set = (k: keyof typeof f, v: string) => setF({ ...f, [k]: v })
  const submit = async (e: Event) => {
    e.preventDefault()
    let payload: unknown
    try { payload = JSON.parse(f.payload || '{}') } catch { setErr('The payload is not valid JSON.'); return }
    try {
      const body = { name: f.name, queue: f.queue, cron: f.cron, timezone: f.timezone, payload, priority: f.priority }
      if (editing) await api.updateSchedule(editing.id, body)
      else await api.createSchedule(body)
      act(`${editing ? 'Saved' : 'Created'} ${f.name}`, async () => null)
      onClose()
    } catch (x) { setErr((x as Error).message) }
  }
  return (
    <Dialog title={editing ? `Edit schedule ${editing.name}` : 'New schedule'} onClose={onClose}>
      <form class="form" onSubmit={submit}>
        <label>Name<input required value={f.name} onInput={(e) => set('name', (e.target as HTMLInputElement).value)} autoFocus /></label>
        <label>Queue<input required value={f.queue} onInput={(e) => set('queue', (e.target as HTMLInputElement).value)} /></label>
        <div class="row">
          <label>Cron (min hour day month weekday)<input required class="mono" value={f.cron} onInput={(e) => set('cron', (e.target as HTMLInputElement).value)} /></label>
          <label>Time zone<input value={f.timezone} onInput={(e) => set('timezone', (e.target as HTMLInputElement).value)} /></label>
        </div>
        <label>Priority
          <select value={f.priority} onChange={(e) => set('priority', (e.target as HTMLSelectElement).value)}>{PRIORITIES.map((p) => <option key={p}>{p}</option>)}</select>
        </label>
        <label>Payload (JSON)<textarea class="mono" rows={4} value={f.payload} onInput={(e) => set('payload', (e.target as HTMLTextAreaElement).value)} /></label>
        {err && <p class="error-note" role="alert">{err}</p>}
        <div class="dialog-actions">
          <button type="button" class="btn" onClick={onClose}>Cancel</button>
          <button type="submit" class="btn primary">{editing ? 'Save' : 'Create'}</button>
        </div>
      </form>
    </Dialog>
  )
}
