// The shell: sidebar (a drawer on phones), header with live status, theme
// toggle and "enqueue job", and the routed page.
import { useEffect, useState } from 'preact/hooks'
import { href, match, navigate, onLinkClick, useLocation } from './router'
import { startLive, stopLive, useLiveStatus } from './live'
import { checkAuth, logout, useAuth } from './auth'
import type { WhoAmI } from './api'
import { NamespacePicker } from './components/NamespacePicker'
import { NAMESPACES_PERMISSION } from './namespace'
import { AUDIT_PERMISSION } from './audit'
import { Login } from './pages/Login'
import { Toasts } from './components/ui'
import { lazy } from './components/lazy'
import { EnqueueDialog } from './components/EnqueueDialog'
import { Dashboard } from './pages/Dashboard'
import { QueuesPage } from './pages/Queues'
import { QueueDetail } from './pages/QueueDetail'
import { JobsPage } from './pages/Jobs'
import { JobDetail } from './pages/JobDetail'

// The pages an operator opens every day are in the main bundle; the
// others are chunks of their own, loaded when first opened.
const WorkersPage = lazy(() => import('./pages/Workers').then((m) => m.WorkersPage))
const SchedulesPage = lazy(() => import('./pages/Schedules').then((m) => m.SchedulesPage))
const ClusterPage = lazy(() => import('./pages/Cluster').then((m) => m.ClusterPage))
const BulkPage = lazy(() => import('./pages/Bulk').then((m) => m.BulkPage))
const BatchPage = lazy(() => import('./pages/Batch').then((m) => m.BatchPage))
const AuditPage = lazy(() => import('./pages/Audit').then((m) => m.AuditPage))
const CostPage = lazy(() => import('./pages/Cost').then((m) => m.CostPage))
const NamespacesPage = lazy(() => import('./pages/Namespaces').then((m) => m.NamespacesPage))

// A page with `perm` is offered only to a key holding that permission.
const NAV: { path: string; label: string; icon: string; key?: string; perm?: string }[] = [
  { path: '/', label: 'Dashboard', icon: '◧', key: 'd' },
  { path: '/queues', label: 'Queues', icon: '☰', key: 'q' },
  { path: '/jobs', label: 'Jobs', icon: '⌕', key: 'j' },
  { path: '/dead', label: 'Dead letters', icon: '✕', key: 'x' },
  { path: '/held', label: 'Held', icon: '◐', key: 'h' },
  { path: '/cost', label: 'Cost', icon: '$', key: 'u' },
  { path: '/workers', label: 'Workers', icon: '⚙', key: 'w' },
  { path: '/schedules', label: 'Schedules', icon: '◷', key: 's' },
  { path: '/bulk', label: 'Bulk operations', icon: '⇶', key: 'b' },
  { path: '/cluster', label: 'Cluster', icon: '⬡', key: 'c' },
  { path: '/audit', label: 'Audit log', icon: '✎', key: 'a', perm: AUDIT_PERMISSION },
  { path: '/namespaces', label: 'Namespaces', icon: '▦', key: 'n', perm: NAMESPACES_PERMISSION },
]

function navFor(who: WhoAmI) {
  return NAV.filter((n) => !n.perm || who.permissions.includes(n.perm))
}

type Theme = 'light' | 'dark'
function initialTheme(): Theme {
  const saved = localStorage.getItem('corvo-theme')
  if (saved === 'light' || saved === 'dark') return saved
  return window.matchMedia?.('(prefers-color-scheme: dark)').matches ? 'dark' : 'light'
}

function page(path: string, query: URLSearchParams, who: WhoAmI) {
  let m: Record<string, string> | null
  if (path === '/') return <Dashboard />
  if (path === '/queues') return <QueuesPage />
  if ((m = match('/queues/:name', path))) return <QueueDetail name={m.name} query={query} />
  if (path === '/jobs') return <JobsPage query={query} preset="all" />
  if (path === '/dead') return <JobsPage query={query} preset="dead" />
  if (path === '/held') return <JobsPage query={query} preset="held" />
  if ((m = match('/jobs/:id', path))) return <JobDetail id={m.id} />
  if ((m = match('/batches/:id', path))) return <BatchPage key={m.id} id={m.id} query={query} />
  if (path === '/cost') return <CostPage query={query} />
  if (path === '/workers') return <WorkersPage />
  if (path === '/schedules') return <SchedulesPage />
  if (path === '/bulk') return <BulkPage />
  if (path === '/cluster') return <ClusterPage />
  if (path === '/audit') return <AuditPage query={query} who={who} />
  if (path === '/namespaces') return <NamespacesPage who={who} />
  return (
    <section>
      <h1>Not found</h1>
      <p>There is no page at {path}. <a href={href('/')}>Go to the dashboard</a>.</p>
    </section>
  )
}

function active(navPath: string, path: string) {
  if (navPath === '/') return path === '/'
  if (navPath === '/jobs') return path === '/jobs' || path.startsWith('/jobs/') || path.startsWith('/batches/')
  return path === navPath || path.startsWith(navPath + '/')
}

// App shows the login while the server wants a key it has not got, and
// the console (Shell) once it has; every call answered 401 brings the
// login back.
export function App() {
  const auth = useAuth()
  useEffect(() => { void checkAuth() }, [])
  if (auth.state === 'checking') return <p class="muted loading" role="status">Loading…</p>
  if (auth.state === 'login') return <Login message={auth.message} />
  return <Shell who={auth.who} />
}

// Who: the key's name and role, and a log out when a key is in use (an
// open server's anonymous caller has none); and always the namespace the
// console acts in, with a picker when the session may act in several.
function Who({ who }: { who: WhoAmI }) {
  const signedIn = who.key_id !== ''
  if (!signedIn && !who.namespace) return null
  return (
    <span class="who" data-testid="who">
      {signedIn && <span class="who-name">{who.name}</span>}
      <NamespacePicker who={who} />
      {signedIn && <span class="role">{who.role}</span>}
      {signedIn && <button class="btn" onClick={() => { void logout() }}>Log out</button>}
    </span>
  )
}

function Shell({ who }: { who: WhoAmI }) {
  const loc = useLocation()
  const [theme, setTheme] = useState<Theme>(initialTheme)
  const [drawer, setDrawer] = useState(false)
  const [enqueue, setEnqueue] = useState(false)
  const live = useLiveStatus()
  const nav = navFor(who)

  useEffect(() => {
    startLive()
    return () => stopLive()
  }, [])
  useEffect(() => {
    document.documentElement.dataset.theme = theme
    localStorage.setItem('corvo-theme', theme)
  }, [theme])
  useEffect(() => { setDrawer(false) }, [loc.path])

  // Keyboard: "/" focuses search, "g" then a letter goes to a page, "n" opens enqueue.
  useEffect(() => {
    let g = false
    const onKey = (e: KeyboardEvent) => {
      const t = e.target as HTMLElement
      if (e.metaKey || e.ctrlKey || e.altKey || t.closest('input, textarea, select, dialog, [contenteditable]')) return
      if (g) {
        g = false
        const n = nav.find((x) => x.key === e.key)
        if (n) { e.preventDefault(); navigate(n.path) }
        return
      }
      if (e.key === 'g') { g = true; setTimeout(() => { g = false }, 1200); return }
      if (e.key === '/') {
        const s = document.querySelector<HTMLInputElement>('[data-search-focus]')
        if (s) { e.preventDefault(); s.focus() }
      }
      if (e.key === 'n') { e.preventDefault(); setEnqueue(true) }
    }
    window.addEventListener('keydown', onKey)
    return () => window.removeEventListener('keydown', onKey)
  }, [nav.length])

  const liveText = live.state === 'open' ? 'Live'
    : live.state === 'waiting' ? `Reconnecting${live.retryInMs ? ` in ${Math.ceil(live.retryInMs / 1000)}s` : ''} · polling`
    : live.state === 'connecting' ? 'Connecting…'
    : live.state === 'busy' ? 'Busy server · refreshing every few s' : 'Polling'

  return (
    <div class={`shell ${drawer ? 'drawer-open' : ''}`} onClick={(e) => onLinkClick(e as unknown as MouseEvent)}>
      <a class="skip" href="#main">Skip to content</a>
      <header class="top">
        <button class="icon-btn menu-btn" aria-label="Open navigation" aria-expanded={drawer} aria-controls="nav" onClick={() => setDrawer(!drawer)}>☰</button>
        <a class="brand" href={href('/')}><span class="logo" aria-hidden="true">◆</span> Corvo</a>
        <span class={`live live-${live.state}`} role="status" title="Live updates over server-sent events">
          <span class="dot" aria-hidden="true" />{liveText}
        </span>
        <span class="spacer" />
        <Who who={who} />
        <button class="btn primary" onClick={() => setEnqueue(true)} title="Enqueue a job (n)">+ Enqueue</button>
        <button
          class="icon-btn" aria-label={theme === 'dark' ? 'Switch to light mode' : 'Switch to dark mode'}
          aria-pressed={theme === 'dark'} onClick={() => setTheme(theme === 'dark' ? 'light' : 'dark')}
        >{theme === 'dark' ? '☀' : '☾'}</button>
      </header>
      <nav id="nav" class="side" aria-label="Main">
        <ul>
          {nav.map((n) => (
            <li key={n.path}>
              <a href={href(n.path)} aria-current={active(n.path, loc.path) ? 'page' : undefined} title={n.key ? `g then ${n.key}` : undefined}>
                <span class="nav-icon" aria-hidden="true">{n.icon}</span>{n.label}
              </a>
            </li>
          ))}
        </ul>
        <p class="kbd-help">Keys: <kbd>/</kbd> search · <kbd>n</kbd> enqueue · <kbd>g</kbd> <kbd>q</kbd> queues</p>
      </nav>
      {drawer && <div class="scrim" onClick={() => setDrawer(false)} aria-hidden="true" />}
      <main id="main" tabIndex={-1}>
        {page(loc.path, loc.query, who)}
      </main>
      {enqueue && <EnqueueDialog onClose={() => setEnqueue(false)} />}
      <Toasts />
    </div>
  )
}
