// The audit log: who did what to the cluster, newest first, with filters
// in the URL and "Load more" paging (GET /api/v1/audit, audit:read).
import { useEffect, useRef, useState } from 'preact/hooks'
import { api, type AuditRecord, type WhoAmI } from '../api'
import { navigate } from '../router'
import { fmtAgo, fmtInt, fmtTime } from '../format'
import {
  appendAuditPage, auditFormFromQuery, auditParams, auditProblem, auditQueryFromForm, AUDIT_METHODS,
  emptyAuditForm, emptyAuditList, statusTone, whoLabel, type AuditForm, type AuditList, AUDIT_PERMISSION,
} from '../audit'
import { Empty, ErrorNote } from '../components/ui'

export function AuditPage({ query, who }: { query: URLSearchParams; who: WhoAmI }) {
  const allowed = who.permissions.includes(AUDIT_PERMISSION)
  return (
    <section aria-labelledby="h-audit">
      <div class="page-head"><h1 id="h-audit">Audit log</h1></div>
      {allowed
        ? <AuditLog query={query} who={who} />
        : <Empty>The key {who.name ? `“${who.name}” ` : ''}(role {who.role || 'unknown'}) may not read the audit log: that takes the {AUDIT_PERMISSION} permission (admin, operator).</Empty>}
    </section>
  )
}

function AuditLog({ query, who }: { query: URLSearchParams; who: WhoAmI }) {
  const admin = who.role === 'admin'
  const applied = auditFormFromQuery(query)
  const key = auditQueryFromForm(applied, admin).toString()
  const [form, setForm] = useState<AuditForm>(applied)
  const [list, setList] = useState<AuditList>(emptyAuditList)
  const [loaded, setLoaded] = useState(false)
  const [loading, setLoading] = useState(false)
  const [error, setError] = useState<Error | undefined>()
  const ctl = useRef<AbortController | null>(null)

  // load fetches the first page (replacing what is shown once it arrives)
  // or the page after `cursor` (appended). A newer load cancels an older one.
  const load = async (cursor: string | null) => {
    ctl.current?.abort()
    const c = new AbortController()
    ctl.current = c
    const problem = auditProblem(applied)
    if (problem) { setError(new Error(problem)); setList(emptyAuditList); setLoaded(false); return }
    setLoading(true)
    setError(undefined)
    try {
      const page = await api.audit(auditParams(applied, admin, cursor), c.signal)
      if (c.signal.aborted) return
      setList((prev) => appendAuditPage(cursor ? prev : emptyAuditList, page))
      setLoaded(true)
    } catch (e) {
      if (c.signal.aborted) return
      setError(e as Error)
    } finally {
      if (ctl.current === c) setLoading(false)
    }
  }

  useEffect(() => {
    setForm(applied)
    setList(emptyAuditList)
    setLoaded(false)
    void load(null)
    return () => ctl.current?.abort()
  }, [key, admin])

  const set = <K extends keyof AuditForm>(k: K, v: AuditForm[K]) => setForm({ ...form, [k]: v })
  const submit = (e: Event) => {
    e.preventDefault()
    const q = auditQueryFromForm(form, admin).toString()
    if (q === key) void load(null) // the same filters: search again
    else navigate('/audit' + (q ? '?' + q : ''))
  }
  const reset = () => { setForm(emptyAuditForm()); navigate('/audit') }
  const filtered = key !== ''
  const input = (k: keyof AuditForm) => (e: Event) => set(k, (e.target as HTMLInputElement).value)

  return (
    <div class="search">
      <p class="muted intro">
        Every call that changes the cluster — pausing a queue, a bulk action, a new key, a login — and every refusal of one, newest first.
        {!admin && who.namespace && <> This key reads the records of its namespace <strong>{who.namespace}</strong>.</>}
      </p>
      <form class="search-form" onSubmit={submit} role="search" aria-label="Filter the audit log">
        <div class="fields">
          {admin && <label>Namespace<input name="namespace" value={form.namespace} onInput={input('namespace')} placeholder="any" /></label>}
          <label>Key ID<input name="key_id" class="mono" value={form.key_id} onInput={input('key_id')} placeholder="any" spellcheck={false} /></label>
          <label>Method
            <select name="method" value={form.method} onChange={(e) => set('method', (e.target as HTMLSelectElement).value)}>
              <option value="">any</option>
              {AUDIT_METHODS.map((m) => <option key={m} value={m}>{m}</option>)}
            </select>
          </label>
          <label>Path prefix<input name="path_prefix" class="mono" data-search-focus value={form.path_prefix} onInput={input('path_prefix')} placeholder="/api/v1/queues/" spellcheck={false} /></label>
          <label>Status<input name="status" inputMode="numeric" value={form.status} onInput={input('status')} placeholder="any, e.g. 403" /></label>
          <label>Since<input name="since" type="datetime-local" value={form.since} onInput={input('since')} /></label>
          <label>Until<input name="until" type="datetime-local" value={form.until} onInput={input('until')} /></label>
        </div>
        <div class="form-actions">
          <span class="spacer" />
          <button type="button" class="btn" onClick={reset}>Reset</button>
          <button type="submit" class="btn primary">Filter</button>
        </div>
      </form>

      <ErrorNote error={error} />
      <div class="results-head">
        <span data-testid="audit-count" aria-live="polite">
          {loaded ? <><strong>{fmtInt(list.records.length)}</strong> record{list.records.length === 1 ? '' : 's'}{list.hasMore ? ' shown, more to load' : ''}</> : loading ? 'Loading…' : ''}
        </span>
        <span class="spacer" />
        <button type="button" class="btn small" onClick={() => { void load(null) }} disabled={loading}>Refresh</button>
      </div>

      {loaded && (list.records.length ? (
        // The table scrolls sideways on narrow screens and holds no link:
        // the box itself takes focus so a keyboard can scroll it.
        <div class="table-wrap" tabIndex={0} role="region" aria-label="Audit records">
          <table class="grid audit-table">
            <thead>
              <tr>
                <th scope="col">Time</th>
                <th scope="col">Who</th>
                {admin && <th scope="col" class="hide-sm">Namespace</th>}
                <th scope="col">Call</th>
                <th scope="col">Status</th>
                <th scope="col">Summary</th>
                <th scope="col" class="hide-sm">Remote</th>
              </tr>
            </thead>
            <tbody>
              {list.records.map((r) => <AuditRow key={r.id} r={r} showNamespace={admin} />)}
            </tbody>
          </table>
        </div>
      ) : <Empty>{filtered ? 'No audited call matches these filters.' : 'The audit log is empty: no call has changed anything yet.'}</Empty>)}

      {loaded && list.hasMore && (
        <nav class="pager" aria-label="Pages">
          <button type="button" class="btn small" disabled={loading} onClick={() => { void load(list.cursor) }}>Load more</button>
        </nav>
      )}
    </div>
  )
}

const TONE_LABEL = { ok: '', refused: 'refused', failed: 'failed' } as const

function AuditRow({ r, showNamespace }: { r: AuditRecord; showNamespace: boolean }) {
  const tone = statusTone(r.status)
  return (
    <tr data-audit={r.id} data-method={r.method} data-status={r.status}>
      <td class="nowrap"><time dateTime={r.at} title={fmtTime(r.at)}>{fmtAgo(r.at)}</time></td>
      <td class="nowrap">
        <span class="who-name">{whoLabel(r)}</span>
        {r.role && <span class="role">{r.role}</span>}
      </td>
      {showNamespace && <td class="hide-sm">{r.namespace}</td>}
      <td class="mono audit-call"><span class="method">{r.method}</span> {r.path}</td>
      <td><span class={`badge st-${tone}`} title={TONE_LABEL[tone] || undefined}>{r.status}</span></td>
      <td class="audit-summary">{r.summary}</td>
      <td class="mono muted hide-sm nowrap">{r.remote}</td>
    </tr>
  )
}
