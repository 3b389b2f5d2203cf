// The namespace the console acts in (docs/api.md, "Namespaces"): the
// session's own, or the one the corvo_namespace cookie names. An admin may
// act in any namespace, a single sign-on user in one it has a grant for.
import { useEffect, useState } from 'preact/hooks'
import { api, setNamespace, type WhoAmI } from './api'

export const NAMESPACES_PERMISSION = 'namespaces:manage'
export const DEFAULT_NAMESPACE = 'default'

// namespaceProblem is why a name cannot be a namespace's (as the server's
// router.ValidateNamespace), or null.
export function namespaceProblem(name: string): string | null {
  if (name === '') return 'A name is needed.'
  if (name.length > 63) return 'At most 63 characters.'
  if (!/^[a-z0-9][a-z0-9_-]*$/.test(name)) {
    return /^[-_]/.test(name)
      ? 'It cannot start with - or _.'
      : 'Only lowercase letters a-z, digits 0-9, - and _ are allowed.'
  }
  return null
}

// listingAs says whether `who` may list every namespace, and from which
// namespace it must ask: '' for the one it acts in (an admin there), or a
// namespace where a single sign-on user's grant is admin. null: it may not.
export function listingAs(who: WhoAmI): string | null {
  if (who.permissions.includes(NAMESPACES_PERMISSION)) return ''
  const admin = Object.entries(who.grants ?? {}).filter(([, role]) => role === 'admin').map(([ns]) => ns).sort()
  return admin.length ? admin[0] : null
}

// pickable is what `who` may switch to: its grants' namespaces, those
// listed (an admin's), and the one it is in, sorted, default first.
export function pickable(who: WhoAmI, listed: string[]): string[] {
  const all = new Set([...Object.keys(who.grants ?? {}), ...listed])
  if (who.namespace) all.add(who.namespace)
  return [...all].sort((a, b) => (a === DEFAULT_NAMESPACE ? -1 : b === DEFAULT_NAMESPACE ? 1 : a.localeCompare(b)))
}

// switchNamespace makes ns the one the console acts in and reloads the
// page, so that every view, its caches and the event stream follow.
export function switchNamespace(ns: string) {
  setNamespace(ns)
  page.reload()
}

// page.reload reloads the page (an object, so that tests can watch it).
export const page = { reload: () => location.reload() }

// Listeners of "the namespaces changed" (the Namespaces page made or
// deleted one): the picker lists them again.
let generation = 0
const changed = new Set<(n: number) => void>()

export function namespacesChanged() {
  generation++
  changed.forEach((f) => f(generation))
}

// useNamespaceChoices is the list the picker offers `who`: at first what it
// knows without asking (grants, the current namespace), then, for an admin,
// every namespace the server lists. A failed listing leaves the first.
export function useNamespaceChoices(who: WhoAmI): string[] {
  const [listed, setListed] = useState<string[]>([])
  const [gen, setGen] = useState(generation)
  const as = listingAs(who)
  useEffect(() => {
    changed.add(setGen)
    return () => { changed.delete(setGen) }
  }, [])
  useEffect(() => {
    if (as === null) return
    const c = new AbortController()
    api.namespaces(c.signal, as || undefined).then(
      (ns) => { if (!c.signal.aborted) setListed(ns.map((n) => n.name)) },
      () => { /* keep what is known; the pages show the server's errors */ },
    )
    return () => c.abort()
  }, [as, gen])
  return pickable(who, listed)
}
