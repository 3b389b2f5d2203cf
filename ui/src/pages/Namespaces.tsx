// Namespaces, for admins (namespaces:manage): the list with each one's
// number of keys, a new one, and deleting an empty one (the server refuses,
// 409, one that still has keys, queues or schedules: its reason is shown).
import { useEffect, useState } from 'preact/hooks'
import { api, clearNamespace, type Namespace, type WhoAmI } from '../api'
import { fmtAgo, fmtInt, fmtTime } from '../format'
import { Dialog, Empty, ErrorNote, toast } from '../components/ui'
import { DEFAULT_NAMESPACE, NAMESPACES_PERMISSION, namespaceProblem, namespacesChanged, page, switchNamespace } from '../namespace'

export function NamespacesPage({ who }: { who: WhoAmI }) {
  const allowed = who.permissions.includes(NAMESPACES_PERMISSION)
  return (
    <section aria-labelledby="h-ns">
      {allowed
        ? <NamespaceList who={who} />
        : (
          <>
            <div class="page-head"><h1 id="h-ns">Namespaces</h1></div>
            <Empty>{who.name ? `“${who.name}” ` : 'This session '}(role {who.role || 'unknown'}) may not manage namespaces: that takes the {NAMESPACES_PERMISSION} permission (admin).</Empty>
          </>
        )}
    </section>
  )
}

function NamespaceList({ who }: { who: WhoAmI }) {
  const [list, setList] = useState<Namespace[] | undefined>()
  const [error, setError] = useState<Error | undefined>()
  const [gen, setGen] = useState(0)
  const [creating, setCreating] = useState(false)
  const [deleting, setDeleting] = useState<Namespace | null>(null)
  const reload = () => setGen((g) => g + 1)

  useEffect(() => {
    const c = new AbortController()
    api.namespaces(c.signal).then(
      (ns) => { if (!c.signal.aborted) { setList(ns); setError(undefined) } },
      (e: Error) => { if (!c.signal.aborted) setError(e) },
    )
    return () => c.abort()
  }, [gen])

  const changed = () => { namespacesChanged(); reload() }

  return (
    <>
      <div class="page-head">
        <h1 id="h-ns">Namespaces</h1>
        <button class="btn primary small" onClick={() => setCreating(true)}>+ New namespace</button>
      </div>
      <p class="muted">
        Each namespace has its own queues, jobs, schedules and keys. The console acts in <strong data-testid="ns-current">{who.namespace}</strong>; the picker in the header switches.
      </p>
      <ErrorNote error={error} />
      {list && (list.length ? (
        <div class="table-wrap">
          <table class="grid" data-testid="ns-table">
            <thead>
              <tr>
                <th scope="col">Name</th><th scope="col">Description</th><th scope="col" class="num">Keys</th>
                <th scope="col" class="hide-sm">Created</th><th scope="col"><span class="sr-only">Actions</span></th>
              </tr>
            </thead>
            <tbody>
              {list.map((n) => (
                <tr key={n.name} data-namespace={n.name}>
                  <th scope="row">
                    {n.name}
                    {n.name === who.namespace && <> <span class="badge">current</span></>}
                  </th>
                  <td>{n.description || <span class="muted">—</span>}</td>
                  <td class="num" data-testid="ns-keys">{fmtInt(n.keys)}</td>
                  <td class="hide-sm" title={n.created_at ?? ''}>{n.created_at ? `${fmtTime(n.created_at)} (${fmtAgo(n.created_at)})` : '—'}</td>
                  <td class="actions">
                    {n.name !== who.namespace && (
                      <button class="btn small" aria-label={`Switch to namespace ${n.name}`} onClick={() => switchNamespace(n.name)}>Switch to</button>
                    )}
                    {' '}
                    {n.name !== DEFAULT_NAMESPACE && (
                      <button class="btn small danger" aria-label={`Delete namespace ${n.name}`} onClick={() => setDeleting(n)}>Delete</button>
                    )}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      ) : <Empty>No namespaces.</Empty>)}
      {creating && <CreateDialog onClose={() => setCreating(false)} onCreated={changed} />}
      {deleting && (
        <DeleteDialog
          ns={deleting} current={deleting.name === who.namespace} onClose={() => setDeleting(null)}
          onDeleted={() => { setDeleting(null); changed() }}
        />
      )}
    </>
  )
}

function CreateDialog({ onClose, onCreated }: { onClose: () => void; onCreated: () => void }) {
  const [name, setName] = useState('')
  const [description, setDescription] = useState('')
  const [err, setErr] = useState<string | null>(null)
  const [busy, setBusy] = useState(false)
  const submit = async (e: Event) => {
    e.preventDefault()
    const problem = namespaceProblem(name)
    if (problem) { setErr(`The name: ${problem}`); return }
    setBusy(true)
    try {
      await api.createNamespace(name, description)
      toast(`Created namespace ${name}`)
      onCreated()
      onClose()
    } catch (x) {
      setErr((x as Error).message)
    } finally {
      setBusy(false)
    }
  }
  return (
    <Dialog title="New namespace" onClose={onClose}>
      <form class="form" onSubmit={submit} noValidate>
        <label>Name
          <input
            value={name} maxLength={63} autoFocus autoComplete="off" spellcheck={false} aria-describedby="ns-name-hint"
            aria-invalid={err !== null && namespaceProblem(name) !== null}
            onInput={(e) => { setName((e.target as HTMLInputElement).value); setErr(null) }}
          />
        </label>
        <p id="ns-name-hint" class="muted small">1–63 of a-z, 0-9, - and _, not starting with - or _.</p>
        <label>Description (optional)
          <input value={description} maxLength={256} onInput={(e) => setDescription((e.target as HTMLInputElement).value)} />
        </label>
        {err && <p class="error-note" role="alert" data-testid="ns-create-error">{err}</p>}
        <div class="dialog-actions">
          <button type="button" class="btn" onClick={onClose}>Cancel</button>
          <button type="submit" class="btn primary" disabled={busy}>Create</button>
        </div>
      </form>
    </Dialog>
  )
}

// DeleteDialog asks first; the server's refusal (a namespace still in use)
// stays in the dialog. Deleting the namespace the console acts in takes it
// back to the session's own.
function DeleteDialog({ ns, current, onClose, onDeleted }: { ns: Namespace; current: boolean; onClose: () => void; onDeleted: () => void }) {
  const [err, setErr] = useState<string | null>(null)
  const [busy, setBusy] = useState(false)
  const run = async () => {
    setBusy(true)
    try {
      await api.deleteNamespace(ns.name)
    } catch (x) {
      setErr((x as Error).message)
      setBusy(false)
      return
    }
    if (current) {
      clearNamespace()
      page.reload()
      return
    }
    toast(`Deleted namespace ${ns.name}`)
    onDeleted()
  }
  return (
    <Dialog title={`Delete namespace ${ns.name}?`} onClose={onClose}>
      <p>Only an empty namespace can be deleted: revoke its keys and delete its queues and schedules first.</p>
      {current && <p>The console acts in it now: it goes back to its own namespace.</p>}
      {err && <p class="error-note" role="alert" data-testid="ns-delete-error">{err}</p>}
      <div class="dialog-actions">
        <button class="btn" onClick={onClose}>Cancel</button>
        <button class="btn danger" autoFocus disabled={busy} onClick={() => { void run() }}>Delete</button>
      </div>
    </Dialog>
  )
}
