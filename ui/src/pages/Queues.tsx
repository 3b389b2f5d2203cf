import { useState } from 'preact/hooks'
import { api, type Queue } from '../api'
import { useLive } from '../live'
import { href } from '../router'
import { fmtNum, fmtQuantiles, fmtRate } from '../format'
import { loadHistory, recordQueues, rates } from '../queues'
import { act, Dialog, Empty, ErrorNote } from '../components/ui'

export function PauseButton({ q, onDone }: { q: Queue; onDone?: () => void }) {
  const [busy, setBusy] = useState(false)
  const run = async () => {
    setBusy(true)
    await act(q.paused ? `Resumed ${q.name}` : `Paused ${q.name}`, () => (q.paused ? api.resume(q.name) : api.pause(q.name)))
    setBusy(false)
    onDone?.()
  }
  return (
    <button class="btn small" disabled={busy} onClick={run} aria-label={`${q.paused ? 'Resume' : 'Pause'} queue ${q.name}`} title={`${q.paused ? 'Resume' : 'Pause'} queue ${q.name}`}>
      {q.paused ? '▶' : '‖'}<span class="hide-xs">{q.paused ? ' Resume' : ' Pause'}</span>
    </button>
  )
}

export function QueueTable({ queues, compact, onChange }: { queues: Queue[]; compact?: boolean; onChange?: () => void }) {
  return (
    <div class="table-wrap">
      <table class="grid queues-table">
        <thead>
          <tr>
            <th scope="col">Queue</th>
            <th scope="col" class="num">Pending</th>
            <th scope="col" class="num">Active</th>
            {!compact && <th scope="col" class="num hide-sm">Scheduled</th>}
            <th scope="col" class="num hide-sm">Retrying</th>
            <th scope="col" class="num hide-sm">Held</th>
            <th scope="col" class="num hide-xs">Done</th>
            <th scope="col" class="num">Dead</th>
            <th scope="col" class="num hide-sm">Rate</th>
            <th scope="col" class="num hide-sm" title="From runnable to started, over the last 5 minutes">Wait p50/95/99</th>
            <th scope="col" class="num hide-sm" title="From started to finished, over the last 5 minutes">Run p50/95/99</th>
            {!compact && <th scope="col" class="hide-sm">Limits</th>}
            <th scope="col"><span class="sr-only">Actions</span></th>
          </tr>
        </thead>
        <tbody>
          {queues.map((q) => (
            <tr key={q.name} data-queue={q.name} class={q.paused ? 'paused' : ''}>
              <th scope="row">
                <a href={href(`/queues/${encodeURIComponent(q.name)}`)}>{q.name}</a>
                {q.paused && <span class="badge s-paused" data-testid="paused-badge">paused</span>}
              </th>
              <td class="num">{fmtNum(q.pending)}</td>
              <td class="num">{fmtNum(q.active)}</td>
              {!compact && <td class="num hide-sm">{fmtNum(q.scheduled)}</td>}
              <td class="num hide-sm">{fmtNum(q.retrying)}</td>
              <td class="num hide-sm" data-testid="q-held">{q.held ? <a href={href('/held', `queue=${encodeURIComponent(q.name)}`)}>{fmtNum(q.held)}</a> : '0'}</td>
              <td class="num hide-xs">{fmtNum(q.completed)}</td>
              <td class="num">{q.dead ? <a href={href('/dead', `queue=${encodeURIComponent(q.name)}`)} class="bad">{fmtNum(q.dead)}</a> : '0'}</td>
              <td class="num hide-sm">{q.paused ? '—' : fmtRate(rates(q, 0, undefined).done)}</td>
              <td class="num hide-sm" data-testid="q-wait">{fmtQuantiles(q.latency?.wait_ms)}</td>
              <td class="num hide-sm" data-testid="q-run">{fmtQuantiles(q.latency?.run_ms)}</td>
              {!compact && (
                <td class="hide-sm small">
                  {q.max_concurrency ? `≤${q.max_concurrency} active` : ''}
                  {q.max_concurrency && q.throttle ? ' · ' : ''}
                  {q.throttle ? `${q.throttle.rate}/${q.throttle.period}` : ''}
                  {!q.max_concurrency && !q.throttle ? <span class="muted">none</span> : ''}
                </td>
              )}
              <td class="actions"><PauseButton q={q} onDone={onChange} /></td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  )
}

export function QueuesPage() {
  const [filter, setFilter] = useState('')
  const { data, error, reload } = useLive(async (s) => { const [qs] = await Promise.all([api.queues(s), loadHistory(s)]); recordQueues(qs); return qs }, 'queues', { pollLiveMs: 5000, pollOfflineMs: 2000 })
  const list = (data ?? []).filter((q) => q.name.toLowerCase().includes(filter.toLowerCase()))
  return (
    <section aria-labelledby="h-queues">
      <div class="page-head">
        <h1 id="h-queues">Queues</h1>
        <label class="inline">
          <span class="sr-only">Filter queues</span>
          <input type="search" placeholder="Filter queues" value={filter} data-search-focus onInput={(e) => setFilter((e.target as HTMLInputElement).value)} />
        </label>
      </div>
      <ErrorNote error={error} />
      {data && (list.length ? <QueueTable queues={list} onChange={reload} /> : <Empty>{data.length ? 'No queue matches.' : 'No queues yet.'}</Empty>)}
    </section>
  )
}

// QueueSettings: concurrency cap and throttle of one queue.
export function QueueSettingsDialog({ q, onClose }: { q: Queue; onClose: () => void }) {
  const [max, setMax] = useState(q.max_concurrency ? String(q.max_concurrency) : '')
  const [rate, setRate] = useState(q.throttle ? String(q.throttle.rate) : '')
  const [period, setPeriod] = useState(q.throttle?.period ?? '1m')
  const [busy, setBusy] = useState(false)
  const save = async (e: Event) => {
    e.preventDefault()
    setBusy(true)
    const m = max.trim() === '' ? null : Number(max)
    let ok = await act(`Concurrency of ${q.name} set`, () => api.concurrency(q.name, m))
    if (ok) {
      ok = rate.trim() === ''
        ? (q.throttle ? await act(`Throttle of ${q.name} removed`, () => api.unthrottle(q.name)) : true)
        : await act(`Throttle of ${q.name} set`, () => api.throttle(q.name, Number(rate), period))
    }
    setBusy(false)
    if (ok) onClose()
  }
  return (
    <Dialog title={`Limits of ${q.name}`} onClose={onClose}>
      <form onSubmit={save} class="form">
        <label>Max active jobs (empty: no cap; 1: singleton)
          <input type="number" min={0} value={max} onInput={(e) => setMax((e.target as HTMLInputElement).value)} />
        </label>
        <fieldset>
          <legend>Throttle (empty rate: none)</legend>
          <div class="row">
            <label>Jobs<input type="number" min={1} value={rate} onInput={(e) => setRate((e.target as HTMLInputElement).value)} /></label>
            <label>per<input value={period} onInput={(e) => setPeriod((e.target as HTMLInputElement).value)} placeholder="1m" /></label>
          </div>
        </fieldset>
        <div class="dialog-actions">
          <button type="button" class="btn" onClick={onClose}>Cancel</button>
          <button type="submit" class="btn primary" disabled={busy}>Save</button>
        </div>
      </form>
    </Dialog>
  )
}
