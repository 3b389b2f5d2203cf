// A small History-API router for the app under /ui/. Paths in the app are
// written without the base ("/queues/emails.send"); URLs carry it.
import { useEffect, useState } from 'preact/hooks'

export const BASE = '/ui'

export interface Location { path: string; query: URLSearchParams; search: string }

function current(): Location {
  let p = window.location.pathname
  if (p.startsWith(BASE)) p = p.slice(BASE.length)
  if (p === '') p = '/'
  if (p.length > 1 && p.endsWith('/')) p = p.slice(0, -1)
  return { path: p, query: new URLSearchParams(window.location.search), search: window.location.search }
}

const subs = new Set<() => void>()
function notify() { subs.forEach((f) => f()) }
if (typeof window !== 'undefined') window.addEventListener('popstate', notify)

export function href(path: string, query?: URLSearchParams | string): string {
  const q = typeof query === 'string' ? query : query?.toString()
  return BASE + (path === '/' ? '/' : path) + (q ? (q.startsWith('?') ? q : '?' + q) : '')
}

export function navigate(to: string, opts: { replace?: boolean } = {}) {
  const url = to.startsWith(BASE) ? to : BASE + to
  if (url === window.location.pathname + window.location.search) return
  if (opts.replace) window.history.replaceState(null, '', url)
  else window.history.pushState(null, '', url)
  if (!opts.replace) window.scrollTo(0, 0)
  notify()
}

export function useLocation(): Location {
  const [loc, set] = useState(current)
  useEffect(() => {
    const f = () => set(current())
    subs.add(f)
    return () => { subs.delete(f) }
  }, [])
  return loc
}

// match returns the decoded parameters when `path` fits `pattern`
// ("/queues/:name"), or null.
export function match(pattern: string, path: string): Record<string, string> | null {
  const ps = pattern.split('/').filter(Boolean)
  const xs = path.split('/').filter(Boolean)
  if (ps.length !== xs.length) return null
  const out: Record<string, string> = {}
  for (let i = 0; i < ps.length; i++) {
    if (ps[i].startsWith(':')) {
      try { out[ps[i].slice(1)] = decodeURIComponent(xs[i]) } catch { return null }
    } else if (ps[i] !== xs[i]) return null
  }
  return out
}

// onLinkClick makes an <a href="/ui/..."> navigate in-app on a plain
// left click (modified clicks open a tab as usual).
export function onLinkClick(e: MouseEvent) {
  if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return
  const a = (e.target as Element | null)?.closest?.('a')
  if (!a || a.target || a.hasAttribute('download')) return
  const url = new URL(a.href, window.location.href)
  if (url.origin !== window.location.origin || !url.pathname.startsWith(BASE)) return
  e.preventDefault()
  navigate(url.pathname + url.search)
}
