import { useState } from 'preact/hooks'
import { api, PRIORITIES } from '../api'
import { navigate } from '../router'
import { parseTags } from '../search'
import { act, Dialog } from './ui'

// EnqueueDialog enqueues one job by hand (the "enqueue job" dialog).
export function EnqueueDialog({ onClose, queue = '' }: { onClose: () => void; queue?: string }) {
  const [f, setF] = useState({ queue, payload: '{\n  \n}', priority: 'normal', max_retries: '3', scheduled_at: '', tags: '', unique_key: '' })
  const [err, setErr] = useState<string | null>(null)
  const [busy, setBusy] = useState(false)
  const set = (k: keyof typeof f, v: string) => setF({ ...f, [k]: v })
  const submit = async (e: Event) => {
    e.preventDefault()
    let payload: unknown
    try { payload = JSON.parse(f.payload.trim() || '{}') } catch { setErr('The payload is not valid JSON.'); return }
    const body: Record<string, unknown> = { queue: f.queue.trim(), payload, priority: f.priority }
    if (f.max_retries !== '') body.max_retries = Number(f.max_retries)
    if (f.scheduled_at) body.scheduled_at = new Date(f.scheduled_at).toISOString()
    const tags = parseTags(f.tags)
    if (tags.length) body.tags = Object.fromEntries(tags)
    if (f.unique_key.trim()) body.unique_key = f.unique_key.trim()
    setBusy(true)
    try {
      const r = await api.enqueue(body)
      act(`Enqueued ${r.job_id} (${r.status})`, async () => r)
      onClose()
      navigate(`/jobs/${encodeURIComponent(r.job_id)}`)
    } catch (x) {
      setErr((x as Error).message)
      setBusy(false)
    }
  }
  return (
    <Dialog title="Enqueue a job" onClose={onClose}>
      <form class="form" onSubmit={submit}>
        <label>Queue<input required name="queue" value={f.queue} onInput={(e) => set('queue', (e.target as HTMLInputElement).value)} placeholder="emails.send" autoFocus /></label>
        <label>Payload (JSON)<textarea name="payload" class="mono" rows={5} value={f.payload} onInput={(e) => set('payload', (e.target as HTMLTextAreaElement).value)} spellcheck={false} /></label>
        <div class="row">
          <label>Priority
            <select name="priority" value={f.priority} onChange={(e) => set('priority', (e.target as HTMLSelectElement).value)}>{PRIORITIES.map((p) => <option key={p}>{p}</option>)}</select>
          </label>
          <label>Max retries<input type="number" min={0} max={1000} value={f.max_retries} onInput={(e) => set('max_retries', (e.target as HTMLInputElement).value)} /></label>
        </div>
        <label>Run at (empty: now)<input type="datetime-local" value={f.scheduled_at} onInput={(e) => set('scheduled_at', (e.target as HTMLInputElement).value)} /></label>
        <div class="row">
          <label>Tags<input value={f.tags} onInput={(e) => set('tags', (e.target as HTMLInputElement).value)} placeholder="tenant=acme" /></label>
          <label>Unique key<input value={f.unique_key} onInput={(e) => set('unique_key', (e.target as HTMLInputElement).value)} /></label>
        </div>
        {err && <p class="error-note" role="alert">{err}</p>}
        <div class="dialog-actions">
          <button type="button" class="btn" onClick={onClose}>Cancel</button>
          <button type="submit" class="btn primary" disabled={busy}>Enqueue</button>
        </div>
      </form>
    </Dialog>
  )
}
