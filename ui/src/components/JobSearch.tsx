// Search form, results with selection and paging, and the bulk bar. The
// search lives in the URL; paging cursors live in the component.
import { useEffect, useState } from 'preact/hooks'
import { api, JOB_STATES, PRIORITIES, type BulkAction, type JobRow, type JobState, type Priority, type SearchPage } from '../api'
import { useLive } from '../live'
import { href, navigate } from '../router'
import { fmtAgo, fmtInt, preview, shortId } from '../format'
import { describe, filterFromForm, formFromQuery, queryFromForm, SORTS, type SearchForm } from '../search'
import { ACTIONS, BulkDialog, type BulkTarget } from './Bulk'
import { Empty, ErrorNote, ProgressBar, StateBadge, toast } from './ui'

const PAGE = 50

interface Props {
  basePath: string            // where the search lives ("/queues/x", "/jobs", "/dead")
  query: URLSearchParams
  fixedQueue?: string         // the queue page: the queue is not a form field
  fixedStates?: JobState[]    // dead letters, held jobs
  actions?: BulkAction[]      // which bulk actions to offer (default: all)
}

export function JobSearch({ basePath, query, fixedQueue, fixedStates, actions }: Props) {
  const applied = formFromQuery(query)
  if (fixedQueue) applied.queue = fixedQueue
  if (fixedStates) applied.states = fixedStates
  const [form, setForm] = useState<SearchForm>(applied)
  const [cursors, setCursors] = useState<(string | null)[]>([null])
  const [selected, setSelected] = useState<Set<string>>(new Set())
  const [bulk, setBulk] = useState<{ action: BulkAction; target: BulkTarget } | null>(null)
  const [more, setMore] = useState(!!(applied.priority || applied.tags || applied.after || applied.before || applied.worker || applied.id || applied.error))
  const key = basePath + '?' + query.toString()

  useEffect(() => { setForm(applied); setCursors([null]); setSelected(new Set()) }, [key])

  const filter = filterFromForm(applied)
  const cursor = cursors[cursors.length - 1]
  const { data, error, reload } = useLive<SearchPage>(
    (s) => api.search({ ...filter, cursor, limit: PAGE }, s),
    key + '#' + (cursor ?? ''),
    { match: (e) => !fixedQueue || e.queue === fixedQueue, minGapMs: 1500, pollLiveMs: 20_000, pollOfflineMs: 4000 },
  )

  const submit = (e: Event) => {
    e.preventDefault()
    const q = queryFromForm(form, !fixedQueue)
    if (fixedStates) q.delete('state')
    navigate(basePath + (q.toString() ? '?' + q.toString() : ''))
  }
  const reset = () => {
    const f: SearchForm = { ...formFromQuery(new URLSearchParams()), queue: fixedQueue ?? '', states: fixedStates ?? [] }
    setForm(f)
    navigate(basePath)
  }
  const set = <K extends keyof SearchForm>(k: K, v: SearchForm[K]) => setForm({ ...form, [k]: v })
  const toggleState = (s: JobState) => set('states', form.states.includes(s) ? form.states.filter((x) => x !== s) : [...form.states, s])

  const rows = data?.jobs ?? []
  const allOnPage = rows.length > 0 && rows.every((r) => selected.has(r.id))
  const toggleAll = () => {
    const n = new Set(selected)
    if (allOnPage) rows.forEach((r) => n.delete(r.id)); else rows.forEach((r) => n.add(r.id))
    setSelected(n)
  }
  const toggle = (id: string) => { const n = new Set(selected); if (n.has(id)) n.delete(id); else n.add(id); setSelected(n) }

  const openBulk = (action: BulkAction, scope: 'selection' | 'search') => {
    const desc = describe(applied)
    const target: BulkTarget = scope === 'selection'
      ? { ids: [...selected], count: selected.size, description: `the ${selected.size} selected`, sample: rows.filter((r) => selected.has(r.id)) }
      : { filter, count: data?.total ?? 0, description: `every job matching ${desc}`, sample: rows }
    setBulk({ action, target })
  }
  // Held jobs are released one by one (the API has no bulk approve); a
  // selection is at most a page.
  const release = async (approve: boolean) => {
    const ids = [...selected]
    let ok = 0
    const failed: string[] = []
    for (const id of ids) {
      try { await (approve ? api.approve(id) : api.reject(id)); ok++ } catch (e) { failed.push(`${shortId(id)}: ${(e as Error).message}`) }
    }
    toast(`${approve ? 'Approved' : 'Rejected'} ${ok} of ${ids.length}${failed.length ? ` (${failed[0]}${failed.length > 1 ? ', …' : ''})` : ''}`, failed.length ? 'error' : 'ok')
    setSelected(new Set())
    reload()
  }
  const offered = ACTIONS.filter((a) => !actions || actions.includes(a.action))

  return (
    <div class="search">
      <form class="search-form" onSubmit={submit} role="search" aria-label="Search jobs">
        {!fixedStates && (
          <fieldset class="chips">
            <legend>State</legend>
            {JOB_STATES.map((s) => (
              <label key={s} class={`chip ${form.states.includes(s) ? 'on' : ''}`}>
                <input type="checkbox" checked={form.states.includes(s)} onChange={() => toggleState(s)} />{s}
              </label>
            ))}
          </fieldset>
        )}
        <div class="fields">
          {!fixedQueue && (
            <label>Queue<input name="queue" value={form.queue} onInput={(e) => set('queue', (e.target as HTMLInputElement).value)} placeholder="any" /></label>
          )}
          <label>Payload contains<input name="payload" data-search-focus value={form.payload} onInput={(e) => set('payload', (e.target as HTMLInputElement).value)} placeholder="user@example.com" /></label>
          <label>jq filter<input name="jq" class="mono" value={form.jq} onInput={(e) => set('jq', (e.target as HTMLInputElement).value)} placeholder='.template == "welcome"' spellcheck={false} /></label>
        </div>
        {more && (
          <div class="fields">
            <label>Error contains<input name="error" value={form.error} onInput={(e) => set('error', (e.target as HTMLInputElement).value)} /></label>
            <label>Priority
              <select name="priority" value={form.priority} onChange={(e) => set('priority', (e.target as HTMLSelectElement).value as Priority | '')}>
                <option value="">any</option>
                {PRIORITIES.map((p) => <option key={p} value={p}>{p}</option>)}
              </select>
            </label>
            <label>Tags<input name="tags" value={form.tags} onInput={(e) => set('tags', (e.target as HTMLInputElement).value)} placeholder="tenant=acme" /></label>
            <label>Created after<input name="after" type="datetime-local" value={form.after} onInput={(e) => set('after', (e.target as HTMLInputElement).value)} /></label>
            <label>Created before<input name="before" type="datetime-local" value={form.before} onInput={(e) => set('before', (e.target as HTMLInputElement).value)} /></label>
            <label>Worker<input name="worker" value={form.worker} onInput={(e) => set('worker', (e.target as HTMLInputElement).value)} /></label>
            <label>Job ID prefix<input name="id" class="mono" value={form.id} onInput={(e) => set('id', (e.target as HTMLInputElement).value)} /></label>
            <label>Sort
              <span class="row">
                <select name="sort" value={form.sort} onChange={(e) => set('sort', (e.target as HTMLSelectElement).value)}>
                  {SORTS.map((s) => <option key={s} value={s}>{s.replace('_at', '').replace('_', ' ')}</option>)}
                </select>
                <select name="order" aria-label="Order" value={form.order} onChange={(e) => set('order', (e.target as HTMLSelectElement).value as 'asc' | 'desc')}>
                  <option value="desc">newest first</option><option value="asc">oldest first</option>
                </select>
              </span>
            </label>
          </div>
        )}
        <div class="form-actions">
          <button type="button" class="link-btn" aria-expanded={more} onClick={() => setMore(!more)}>{more ? 'Fewer filters' : 'More filters'}</button>
          <span class="spacer" />
          <button type="button" class="btn" onClick={reset}>Reset</button>
          <button type="submit" class="btn primary">Search</button>
        </div>
      </form>

      <ErrorNote error={error} />
      <div class="results-head">
        <span data-testid="result-count" aria-live="polite">
          {data ? <><strong>{fmtInt(data.total)}</strong> result{data.total === 1 ? '' : 's'} <span class="muted">({fmtInt(data.duration_ms)} ms)</span></> : 'Searching…'}
        </span>
        <span class="spacer" />
        {data && data.total > 0 && (
          <details class="menu">
            <summary class="btn">Bulk on all {fmtInt(data.total)} ▾</summary>
            <div class="menu-list" role="menu">
              {offered.map((a) => <button key={a.action} role="menuitem" class={a.danger ? 'danger-text' : ''} onClick={(e) => { (e.currentTarget.closest('details') as HTMLDetailsElement).open = false; openBulk(a.action, 'search') }}>{a.label} all matching</button>)}
            </div>
          </details>
        )}
      </div>

      {selected.size > 0 && (
        <div class="bulk-bar" role="region" aria-label="Bulk actions for the selection">
          <strong>{selected.size} selected</strong>
          {fixedStates?.includes('held') && (
            <>
              <button class="btn small primary" onClick={() => release(true)}>Approve</button>
              <button class="btn small danger" onClick={() => release(false)}>Reject</button>
            </>
          )}
          {offered.map((a) => <button key={a.action} class={`btn small ${a.danger ? 'danger' : ''}`} onClick={() => openBulk(a.action, 'selection')}>{a.label}</button>)}
          <button class="link-btn" onClick={() => setSelected(new Set())}>Clear selection</button>
        </div>
      )}

      {data && (rows.length ? (
        <div class="table-wrap">
          <table class="grid jobs-table">
            <thead>
              <tr>
                <th scope="col" class="check"><input type="checkbox" aria-label="Select every job on this page" checked={allOnPage} onChange={toggleAll} /></th>
                <th scope="col">Job ID</th>
                <th scope="col">State</th>
                {!fixedQueue && <th scope="col">Queue</th>}
                <th scope="col" class="num hide-sm">Attempt</th>
                <th scope="col" class="hide-sm">Payload</th>
                <th scope="col" class="hide-sm">Error / progress</th>
                <th scope="col" class="hide-xs">Created</th>
              </tr>
            </thead>
            <tbody>
              {rows.map((j) => <JobRowView key={j.id} j={j} showQueue={!fixedQueue} checked={selected.has(j.id)} onToggle={() => toggle(j.id)} />)}
            </tbody>
          </table>
        </div>
      ) : <Empty>No job matches this search.</Empty>)}

      {data && (cursors.length > 1 || data.has_more) && (
        <nav class="pager" aria-label="Pages">
          <button class="btn small" disabled={cursors.length <= 1} onClick={() => setCursors(cursors.slice(0, -1))}>◀ Previous</button>
          <span class="muted">page {cursors.length} of {Math.max(1, Math.ceil(data.total / PAGE))}</span>
          <button class="btn small" disabled={!data.has_more} onClick={() => setCursors([...cursors, data.cursor])}>Next ▶</button>
        </nav>
      )}

      {bulk && <BulkDialog action={bulk.action} target={bulk.target} onClose={() => setBulk(null)} onDone={() => { setSelected(new Set()); reload() }} />}
    </div>
  )
}

function JobRowView({ j, showQueue, checked, onToggle }: { j: JobRow; showQueue: boolean; checked: boolean; onToggle: () => void }) {
  const link = href(`/jobs/${encodeURIComponent(j.id)}`)
  return (
    <tr data-job={j.id} class={checked ? 'selected' : ''}>
      <td class="check"><input type="checkbox" aria-label={`Select ${j.id}`} checked={checked} onChange={onToggle} /></td>
      <td class="mono nowrap">
        <a href={link} title={j.id}>{shortId(j.id)}</a>
        <div class={`show-sm sub ${j.last_error ? 'err' : 'muted'}`}>{j.last_error ?? preview(j.payload, 34)}</div>
      </td>
      <td><StateBadge state={j.state} />{j.priority !== 'normal' && <span class={`prio p-${j.priority}`}>{j.priority}</span>}</td>
      {showQueue && <td><a href={href(`/queues/${encodeURIComponent(j.queue)}`)}>{j.queue}</a></td>}
      <td class="num hide-sm">{j.attempt}/{j.max_retries}</td>
      <td class="mono muted hide-sm payload-cell">{preview(j.payload, 50)}</td>
      <td class="hide-sm err-cell">{j.state === 'active' && j.progress ? <ProgressBar progress={j.progress} /> : <span class="err">{j.last_error ?? j.reason ?? ''}</span>}</td>
      <td class="nowrap hide-xs" title={j.created_at}>{fmtAgo(j.created_at)}</td>
    </tr>
  )
}
