// Search form, results with selection, per-row actions and paging, and the
// bulk bar. The search lives in the URL; paging cursors live in the
// component.
import { useEffect, useState } from 'preact/hooks'
import { api, JOB_STATES, PRIORITIES, type BulkAction, type JobRow, type JobState, type Priority, type SearchPage } from '../api'
import { useLive } from '../live'
import { href, navigate } from '../router'
import { fmtAgo, fmtAttemptShort, fmtInt, fmtTime, rowPayload, shortId } from '../format'
import { activeFilters, describe, filterFromForm, formFromQuery, queryFromForm, reasonText, SORTS, type SearchForm } from '../search'
import { ACTIONS, BulkDialog, type BulkTarget } from './Bulk'
import { act, Dialog, Empty, ErrorNote, ProgressBar, StateBadge, toast } from './ui'

const PAGE = 50

interface Props {
  basePath: string            // where the search lives ("/queues/x", "/jobs", "/dead")
  query: URLSearchParams
  fixedQueue?: string         // the queue page: the queue is not a form field
  fixedStates?: JobState[]    // dead letters, held jobs
  fixedBatch?: string         // the batch page: its members
  actions?: BulkAction[]      // which bulk actions to offer (default: all)
  collapsible?: boolean       // the form folds to one line while no filter is set
  defaultSort?: string        // the sort when the URL names none (default created_at)
}

const FINISHED: JobState[] = ['completed', 'dead', 'cancelled']

export function JobSearch({ basePath, query, fixedQueue, fixedStates, fixedBatch, actions, collapsible, defaultSort = 'created_at' }: Props) {
  const applied = formFromQuery(query)
  if (fixedQueue) applied.queue = fixedQueue
  if (fixedStates) applied.states = fixedStates
  if (fixedBatch) applied.batch = fixedBatch
  if (!query.get('sort')) applied.sort = defaultSort
  const nFilters = activeFilters(applied, { queue: !!fixedQueue, states: !!fixedStates, batch: !!fixedBatch, sort: defaultSort })
  const [form, setForm] = useState<SearchForm>(applied)
  const [cursors, setCursors] = useState<(string | null)[]>([null])
  const [selected, setSelected] = useState<Set<string>>(new Set())
  const [bulk, setBulk] = useState<{ action: BulkAction; target: BulkTarget } | null>(null)
  const [deleting, setDeleting] = useState<JobRow | null>(null)
  const [open, setOpen] = useState(!collapsible || nFilters > 0)
  const [more, setMore] = useState(!!(applied.priority || applied.tags || applied.after || applied.before || applied.worker || applied.id || applied.error || applied.parent || applied.model || applied.minCost || (applied.batch && !fixedBatch)))
  const key = basePath + '?' + query.toString()
  const dead = fixedStates?.length === 1 && fixedStates[0] === 'dead'

  useEffect(() => {
    setForm(applied); setCursors([null]); setSelected(new Set())
    if (nFilters > 0) setOpen(true)
  }, [key])

  const filter = filterFromForm(applied)
  const cursor = cursors[cursors.length - 1]
  const { data, error, reload } = useLive<SearchPage>(
    (s) => api.search({ ...filter, cursor, limit: PAGE }, s),
    key + '#' + (cursor ?? ''),
    { match: (e) => !fixedQueue || e.queue === fixedQueue, minGapMs: 1500, pollLiveMs: 20_000, pollOfflineMs: 4000 },
  )

  const submit = (e: Event) => {
    e.preventDefault()
    const f = { ...form }
    const q = queryFromForm(f, !fixedQueue)
    if (fixedStates) q.delete('state')
    if (fixedBatch) q.delete('batch')
    if (f.sort === defaultSort) q.delete('sort')
    else if (f.sort === 'created_at') q.set('sort', 'created_at')
    navigate(basePath + (q.toString() ? '?' + q.toString() : ''))
  }
  const reset = () => {
    const f: SearchForm = { ...formFromQuery(new URLSearchParams()), queue: fixedQueue ?? '', states: fixedStates ?? [], batch: fixedBatch ?? '', sort: defaultSort }
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
  const rowAct = async (label: string, f: () => Promise<unknown>) => { await act(label, f); reload() }
  const offered = ACTIONS.filter((a) => !actions || actions.includes(a.action))
  const partial = !!data?.partial
  const totalText = data ? (partial ? `≥ ${fmtInt(data.total)}` : fmtInt(data.total)) : ''

  const count = (
    <span data-testid="result-count" aria-live="polite">
      {data ? <><strong>{totalText}</strong> result{data.total === 1 && !partial ? '' : 's'} <span class="muted">({fmtInt(data.duration_ms)} ms)</span></> : 'Searching…'}
    </span>
  )
  const bulkMenu = data && data.total > 0 && (
    <details class="menu">
      <summary class="btn small">Bulk on all {totalText} ▾</summary>
      <div class="menu-list" role="menu">
        {offered.map((a) => <button key={a.action} role="menuitem" class={a.danger ? 'danger-text' : ''} onClick={(e) => { (e.currentTarget.closest('details') as HTMLDetailsElement).open = false; openBulk(a.action, 'search') }}>{a.label} all matching</button>)}
      </div>
    </details>
  )
  const payloadInput = (
    <input name="payload" aria-label={open ? undefined : 'Payload contains'} data-search-focus value={form.payload} onInput={(e) => set('payload', (e.target as HTMLInputElement).value)} placeholder={open ? 'user@example.com' : 'Payload contains…'} />
  )

  return (
    <div class="search">
      {open ? (
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
            <label>Payload contains{payloadInput}</label>
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
              {!fixedBatch && <label>Batch ID<input name="batch" class="mono" value={form.batch} onInput={(e) => set('batch', (e.target as HTMLInputElement).value)} placeholder="batch_…" /></label>}
              <label>Model<input name="model" value={form.model} onInput={(e) => set('model', (e.target as HTMLInputElement).value)} placeholder="claude-sonnet-4-5" spellcheck={false} /></label>
              <label>Cost at least (USD)<input name="min_cost" inputMode="decimal" value={form.minCost} onInput={(e) => set('minCost', (e.target as HTMLInputElement).value)} placeholder="0.05" /></label>
              <label>Waiting on job<input name="depends_on" class="mono" value={form.parent} onInput={(e) => set('parent', (e.target as HTMLInputElement).value)} placeholder="job_…" /></label>
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
            {collapsible && nFilters === 0 && <button type="button" class="link-btn" onClick={() => setOpen(false)}>Hide the form</button>}
            <span class="spacer" />
            <button type="button" class="btn" onClick={reset}>Reset</button>
            <button type="submit" class="btn primary">Search</button>
          </div>
        </form>
      ) : null}

      <ErrorNote error={error} />
      {open ? (
        <div class="results-head">{count}<span class="spacer" />{bulkMenu}</div>
      ) : (
        <div class="results-head">
          {count}
          <span class="spacer" />
          <form class="search-bar" onSubmit={submit} role="search" aria-label="Search jobs">
            {payloadInput}
            <button type="button" class="btn small" aria-expanded={false} data-testid="show-filters" onClick={() => setOpen(true)}>Filters…</button>
            <button type="submit" class="btn small primary">Search</button>
          </form>
          {bulkMenu}
        </div>
      )}
      {partial && (
        <p class="note" role="note" data-testid="partial-note">
          Partial results: the search reached its time limit, so more jobs may match than the {fmtInt(data!.total)} shown by now. Next continues after the last one.
        </p>
      )}

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
          <table class={`grid jobs-table ${dead ? 'dead-table' : ''}`}>
            <thead>
              <tr>
                <th scope="col" class="check"><input type="checkbox" aria-label="Select every job on this page" checked={allOnPage} onChange={toggleAll} /></th>
                <th scope="col">Job ID</th>
                {!dead && <th scope="col" class="hide-xs">State</th>}
                {!fixedQueue && <th scope="col" class="hide-xs">Queue</th>}
                <th scope="col" class="num hide-sm">Attempts</th>
                {dead && <th scope="col" class="hide-sm">Reason</th>}
                <th scope="col" class="hide-sm">Payload</th>
                {!dead && <th scope="col" class="hide-sm">Error / progress</th>}
                <th scope="col" class="hide-xs">{dead ? 'Died' : 'Created'}</th>
                <th scope="col" class="actions"><span class="sr-only">Actions</span></th>
              </tr>
            </thead>
            <tbody>
              {rows.map((j) => (
                <JobRowView
                  key={j.id} j={j} dead={dead} showQueue={!fixedQueue} checked={selected.has(j.id)} onToggle={() => toggle(j.id)}
                  onAct={rowAct} onDelete={() => setDeleting(j)}
                />
              ))}
            </tbody>
          </table>
        </div>
      ) : <Empty>No job matches this search.</Empty>)}

      {data && (cursors.length > 1 || data.has_more) && (
        <nav class="pager" aria-label="Pages">
          <button class="btn small" disabled={cursors.length <= 1} onClick={() => setCursors(cursors.slice(0, -1))}>◀ Previous</button>
          <span class="muted">page {cursors.length}{partial ? '' : ` of ${Math.max(1, Math.ceil(data.total / PAGE))}`}</span>
          <button class="btn small" disabled={!data.has_more} onClick={() => setCursors([...cursors, data.cursor])}>Next ▶</button>
        </nav>
      )}

      {bulk && <BulkDialog action={bulk.action} target={bulk.target} onClose={() => setBulk(null)} onDone={() => { setSelected(new Set()); reload() }} />}
      {deleting && (
        <Dialog title="Delete this job?" onClose={() => setDeleting(null)}>
          <p>Job <span class="mono">{deleting.id}</span> of <strong>{deleting.queue}</strong> and its whole history are deleted.</p>
          <p class="warn">⚠ This action cannot be undone.</p>
          <div class="dialog-actions">
            <button class="btn" onClick={() => setDeleting(null)}>Cancel</button>
            <button class="btn danger" autoFocus onClick={() => { const j = deleting; setDeleting(null); void rowAct(`Deleted ${shortId(j.id)}`, () => api.deleteJob(j.id)) }}>Delete job</button>
          </div>
        </Dialog>
      )}
    </div>
  )
}

interface RowProps {
  j: JobRow; dead: boolean; showQueue: boolean; checked: boolean
  onToggle: () => void
  onAct: (label: string, f: () => Promise<unknown>) => void
  onDelete: () => void
}

export function JobRowView({ j, dead, showQueue, checked, onToggle, onAct, onDelete }: RowProps) {
  const link = href(`/jobs/${encodeURIComponent(j.id)}`)
  const finished = FINISHED.includes(j.state)
  const payload = rowPayload(j, 50)
  const why = [reasonText(j.reason), j.last_error].filter(Boolean).join(': ')
  const when = dead ? j.completed_at : j.created_at
  return (
    <tr data-job={j.id} class={checked ? 'selected' : ''}>
      <td class="check"><input type="checkbox" aria-label={`Select ${j.id}`} checked={checked} onChange={onToggle} /></td>
      <td class="mono nowrap">
        <a href={link} title={j.id}>{shortId(j.id)}</a>
        <div class={`show-sm sub ${j.last_error ? 'err' : 'muted'}`}>{!dead && <span class="show-xs"><StateBadge state={j.state} /> </span>}{showQueue && <span class="show-xs muted">{j.queue} · </span>}{j.last_error ?? rowPayload(j, 34)}</div>
      </td>
      {!dead && <td class="nowrap hide-xs"><StateBadge state={j.state} />{j.priority !== 'normal' && <span class={`prio p-${j.priority}`}>{j.priority}</span>}</td>}
      {showQueue && <td class="nowrap hide-xs"><a href={href(`/queues/${encodeURIComponent(j.queue)}`)}>{j.queue}</a></td>}
      <td class="num hide-sm nowrap" data-testid="attempts">{fmtAttemptShort(j.attempt, j.max_retries)}</td>
      {dead && <td class="hide-sm err-cell" title={why} data-testid="reason"><span class="err">{why}</span></td>}
      <td class="mono muted hide-sm payload-cell" title={j.payload_omitted ? undefined : payload}>
        {j.payload_omitted ? <a href={link} class="omitted" data-testid="payload-omitted">{payload}</a> : payload}
      </td>
      {!dead && <td class="hide-sm err-cell" title={j.last_error ?? j.reason ?? undefined}>{j.state === 'active' && j.progress ? <ProgressBar progress={j.progress} /> : <span class="err">{j.last_error ?? j.reason ?? ''}</span>}</td>}
      <td class="nowrap hide-xs" title={fmtTime(when)} data-testid={dead ? 'died' : undefined}>{fmtAgo(when)}</td>
      <td class="actions row-actions">
        {finished && <button class="btn tiny" aria-label={`Retry ${j.id}`} onClick={() => onAct(`Retried ${shortId(j.id)}`, () => api.retry(j.id))}>Retry</button>}
        {j.state === 'held' && <button class="btn tiny" aria-label={`Approve ${j.id}`} onClick={() => onAct(`Approved ${shortId(j.id)}`, () => api.approve(j.id))}>Approve</button>}
        {!finished && <button class="btn tiny" aria-label={`Cancel ${j.id}`} onClick={() => onAct(`Cancel of ${shortId(j.id)} requested`, () => api.cancel(j.id))}>Cancel</button>}
        <button class="btn tiny danger" aria-label={`Delete ${j.id}`} onClick={onDelete}>Delete</button>
      </td>
    </tr>
  )
}
