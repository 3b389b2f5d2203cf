// Bulk operations: confirmation with a preview, then either the result
// (small operations answer at once) or live progress of an asynchronous
// operation, which can be cancelled.
import { useEffect, useState } from 'preact/hooks'
import { api, ApiError, isAccepted, type BulkAccepted, PRIORITIES, type BulkAction, type BulkOperation, type BulkRequest, type BulkResult, type JobRow, type Priority, type SearchFilter } from '../api'
import { fmtDuration, fmtInt, rowPayload, shortId } from '../format'
import { Dialog, ProgressBar, toast } from './ui'

export const ACTIONS: { action: BulkAction; label: string; verb: string; danger?: boolean; hint: string }[] = [
  { action: 'retry', label: 'Retry', verb: 'retry', hint: 'Completed, dead and cancelled jobs go back to pending with their attempts reset; others are skipped' },
  { action: 'requeue', label: 'Requeue', verb: 'requeue', hint: 'Dead jobs go back to pending, keeping their attempts and history; others are skipped' },
  { action: 'cancel', label: 'Cancel', verb: 'cancel', danger: true, hint: 'Waiting jobs are cancelled at once, active ones when their worker next heartbeats' },
  { action: 'move', label: 'Move…', verb: 'move', hint: 'Jobs move to the target queue with their history; active jobs are skipped' },
  { action: 'change_priority', label: 'Priority…', verb: 'change the priority of', hint: 'Only pending and scheduled jobs change priority; others are skipped' },
  { action: 'delete', label: 'Delete', verb: 'delete', danger: true, hint: 'Jobs are deleted in any state, with their history' },
]

// ASYNC_ABOVE: operations on more jobs than this run in the background
// with a progress view (the server does so above 10,000 on its own).
export const ASYNC_ABOVE = 1000

export interface BulkTarget {
  ids?: string[]        // a selection
  filter?: SearchFilter // or everything a search matches
  count: number
  description: string   // "142 dead jobs in emails.send matching …"
  sample: JobRow[]      // rows already at hand for the preview
}

export function buildRequest(action: BulkAction, t: BulkTarget, opts: { queue?: string; priority?: Priority }): BulkRequest {
  const r: BulkRequest = { action }
  if (t.ids) r.job_ids = t.ids
  else {
    const f = { ...(t.filter ?? {}) }
    delete f.cursor; delete f.limit; delete f.sort; delete f.order
    r.filter = f
    // Built once the user confirmed in the preview, which showed the
    // count: say so, or a filter over a whole queue is refused.
    r.confirm = true
  }
  if (action === 'move') r.move_to_queue = opts.queue
  if (action === 'change_priority') r.priority = opts.priority
  if (t.count > ASYNC_ABOVE) r.async = true
  return r
}

// sendBulk sends a bulk request; a server without asynchronous bulk
// operations (unknown field "async") gets it again as a synchronous one.
export async function sendBulk(r: BulkRequest): Promise<BulkResult | BulkAccepted> {
  try {
    return await api.bulk(r)
  } catch (e) {
    if (r.async && e instanceof ApiError && e.status === 400 && e.message.includes('"async"')) {
      const { async: _drop, ...sync } = r
      void _drop
      return api.bulk(sync)
    }
    throw e
  }
}

export function BulkDialog({ action, target, onClose, onDone }: { action: BulkAction; target: BulkTarget; onClose: () => void; onDone: () => void }) {
  const a = ACTIONS.find((x) => x.action === action)!
  const [queue, setQueue] = useState('')
  const [priority, setPriority] = useState<Priority>('high')
  const [sample, setSample] = useState<JobRow[]>(target.sample.slice(0, 5))
  const [phase, setPhase] = useState<'confirm' | 'running' | 'done'>('confirm')
  const [result, setResult] = useState<BulkResult | null>(null)
  const [opId, setOpId] = useState<string | null>(null)
  const [err, setErr] = useState<string | null>(null)

  useEffect(() => {
    if (target.sample.length >= 5 || !target.filter) return
    api.search({ ...target.filter, cursor: null, limit: 5 }).then((p) => setSample(p.jobs), () => {})
  }, [])

  const run = async (e: Event) => {
    e.preventDefault()
    if (action === 'move' && !queue.trim()) { setErr('Name the target queue.'); return }
    setErr(null)
    setPhase('running')
    try {
      const r = await sendBulk(buildRequest(action, target, { queue: queue.trim(), priority }))
      if (isAccepted(r)) { setOpId(r.bulk_operation_id); return }
      setResult(r)
      setPhase('done')
      toast(`${a.label.replace('…', '')}: ${fmtInt(r.affected)} job${r.affected === 1 ? '' : 's'} affected${r.errors ? `, ${r.errors} not applicable` : ''}`)
      onDone()
    } catch (x) {
      setErr((x as Error).message)
      setPhase('confirm')
    }
  }

  const verbCount = `${a.label.replace('…', '')} ${fmtInt(target.count)} job${target.count === 1 ? '' : 's'}`
  return (
    <Dialog title={`Bulk operation: ${a.label.replace('…', '')}`} onClose={onClose} wide>
      {phase === 'confirm' && (
        <form onSubmit={run} class="form">
          <p>This will {a.verb} <strong>{fmtInt(target.count)}</strong> job{target.count === 1 ? '' : 's'}: {target.description}.</p>
          <p class="muted small">{a.hint}.</p>
          {action === 'move' && (
            <label>Target queue<input required value={queue} onInput={(e) => setQueue((e.target as HTMLInputElement).value)} placeholder="emails.legacy" autoFocus /></label>
          )}
          {action === 'change_priority' && (
            <label>New priority
              <select value={priority} onChange={(e) => setPriority((e.target as HTMLSelectElement).value as Priority)}>
                {PRIORITIES.map((p) => <option key={p} value={p}>{p}</option>)}
              </select>
            </label>
          )}
          {(a.danger || action === 'move') && <p class="warn">⚠ This action cannot be undone.</p>}
          {sample.length > 0 && (
            <>
              <h3>Preview (first {Math.min(5, sample.length)})</h3>
              <table class="grid preview" data-testid="bulk-preview">
                <tbody>
                  {sample.slice(0, 5).map((j) => (
                    <tr key={j.id}><td class="mono">{shortId(j.id)}</td><td>{j.state}</td><td class="mono muted payload-cell">{rowPayload(j, 48)}</td></tr>
                  ))}
                </tbody>
              </table>
              {target.count > 5 && <p class="muted small">… and {fmtInt(target.count - Math.min(5, sample.length))} more</p>}
            </>
          )}
          {err && <p class="error-note" role="alert">{err}</p>}
          <div class="dialog-actions">
            <button type="button" class="btn" onClick={onClose}>Cancel</button>
            <button type="submit" class={`btn ${a.danger ? 'danger' : 'primary'}`} data-testid="bulk-confirm">{verbCount}</button>
          </div>
        </form>
      )}
      {phase === 'running' && !opId && <p aria-live="polite"><span class="spinner" aria-hidden="true" /> Applying to {fmtInt(target.count)} jobs…</p>}
      {phase === 'running' && opId && <BulkProgress id={opId} onFinished={(op) => { setPhase('done'); setResult({ affected: op.affected, errors: op.errors, duration_ms: op.duration_ms }); onDone() }} />}
      {phase === 'done' && result && (
        <div aria-live="polite" data-testid="bulk-result">
          <p><strong>{fmtInt(result.affected)}</strong> job{result.affected === 1 ? '' : 's'} affected in {fmtDuration(result.duration_ms)}.{result.errors ? ` ${fmtInt(result.errors)} could not be (wrong state or gone).` : ''}</p>
          {result.failed && result.failed.length > 0 && (
            <details><summary>Errors</summary>
              <ul class="small mono">{result.failed.slice(0, 20).map((f) => <li key={f.job_id}>{shortId(f.job_id)}: {f.error}</li>)}</ul>
            </details>
          )}
          <div class="dialog-actions"><button class="btn primary" onClick={onClose} autoFocus>Close</button></div>
        </div>
      )}
    </Dialog>
  )
}

// BulkProgress follows one asynchronous operation until it finishes.
export function BulkProgress({ id, onFinished }: { id: string; onFinished?: (op: BulkOperation) => void }) {
  const [op, setOp] = useState<BulkOperation | null>(null)
  const [err, setErr] = useState<string | null>(null)
  useEffect(() => {
    let stop = false
    let t: ReturnType<typeof setTimeout>
    const tick = async () => {
      try {
        const o = await api.bulkStatus(id)
        if (stop) return
        setOp(o)
        if (o.status !== 'processing') { onFinished?.(o); return }
      } catch (e) { if (!stop) setErr((e as Error).message) }
      if (!stop) t = setTimeout(tick, 500)
    }
    void tick()
    return () => { stop = true; clearTimeout(t) }
  }, [id])
  if (!op) return <p>{err ?? 'Starting…'}</p>
  const elapsed = (op.finished_at ? Date.parse(op.finished_at) : Date.now()) - Date.parse(op.created_at)
  const rate = elapsed > 0 ? op.processed / (elapsed / 1000) : 0
  const remaining = rate > 0 ? ((op.total - op.processed) / rate) * 1000 : NaN
  return (
    <div class="bulk-progress" data-testid="bulk-progress">
      <ProgressBar progress={{ current: op.processed, total: op.total }} label="Bulk operation progress" />
      <p class="small">
        Elapsed: {fmtDuration(elapsed)} · {op.status === 'processing' ? <>Remaining: ~{fmtDuration(remaining)} · </> : <>Status: {op.status} · </>}
        Rate: {fmtInt(Math.round(rate))}/s · Errors: {fmtInt(op.errors)}
      </p>
      {op.status === 'processing' && (
        <button class="btn danger" onClick={() => api.bulkCancel(id).then(() => toast('Cancelling the operation'), (e) => toast((e as Error).message, 'error'))}>Cancel operation</button>
      )}
    </div>
  )
}
