// Small shared pieces: dialogs, badges, progress bars, toasts, stat cards.
import type { ComponentChildren } from 'preact'
import { useEffect, useRef, useState } from 'preact/hooks'
import { href } from '../router'
import { normProgress, fmtInt } from '../format'

// Dialog is a native modal <dialog>: the browser traps focus, Esc closes
// it, and focus returns to the opener.
export function Dialog(props: { title: string; onClose: () => void; children: ComponentChildren; wide?: boolean }) {
  const ref = useRef<HTMLDialogElement>(null)
  useEffect(() => {
    const d = ref.current
    if (!d) return
    if (!d.open) d.showModal()
    const onCancel = (e: Event) => { e.preventDefault(); props.onClose() }
    d.addEventListener('cancel', onCancel)
    return () => { d.removeEventListener('cancel', onCancel); if (d.open) d.close() }
  }, [])
  const id = 'dlg-' + props.title.replace(/\W+/g, '-').toLowerCase()
  return (
    <dialog ref={ref} class={props.wide ? 'wide' : ''} aria-labelledby={id}>
      <h2 id={id}>{props.title}</h2>
      {props.children}
    </dialog>
  )
}

export function StateBadge({ state }: { state: string }) {
  return <span class={`badge s-${state}`}>{state}</span>
}

export function ProgressBar({ progress, label }: { progress: unknown; label?: string }) {
  const p = normProgress(progress)
  if (!p) return null
  const text = p.total !== null ? `${fmtInt(p.current)} / ${fmtInt(p.total)}` : fmtInt(p.current)
  return (
    <div class="progress">
      <div
        class="bar" role="progressbar" aria-label={label ?? 'Progress'}
        aria-valuemin={0} aria-valuemax={p.total ?? undefined} aria-valuenow={p.current}
        aria-valuetext={text + (p.message ? ` ${p.message}` : '')}
      >
        <div class={p.percent === null ? 'fill indeterminate' : 'fill'} style={{ width: p.percent === null ? '30%' : `${p.percent}%` }} />
      </div>
      <span class="progress-text" data-testid="progress-text">{text}{p.percent !== null ? ` (${Math.floor(p.percent)}%)` : ''}{p.message ? ` — ${p.message}` : ''}</span>
    </div>
  )
}

export function Stat(props: { label: string; value: string; hint?: string; tone?: string; link?: string; testid?: string }) {
  const body = (
    <>
      <span class="stat-label">{props.label}</span>
      <span class="stat-value" data-testid={props.testid}>{props.value}</span>
      {props.hint && <span class="stat-hint">{props.hint}</span>}
    </>
  )
  return props.link
    ? <a class={`stat ${props.tone ?? ''}`} href={href(props.link)}>{body}</a>
    : <div class={`stat ${props.tone ?? ''}`}>{body}</div>
}

export function ErrorNote({ error }: { error: Error | undefined }) {
  if (!error) return null
  return <p class="error-note" role="alert">{error.message}</p>
}

export function Empty({ children }: { children: ComponentChildren }) {
  return <p class="empty">{children}</p>
}

// Toasts: short confirmations and errors after actions, announced politely.
type Toast = { id: number; text: string; kind: 'ok' | 'error' }
let nextToast = 1
const toastSubs = new Set<(t: Toast[]) => void>()
let toasts: Toast[] = []
export function toast(text: string, kind: 'ok' | 'error' = 'ok') {
  const t = { id: nextToast++, text, kind }
  toasts = [...toasts, t].slice(-4)
  toastSubs.forEach((f) => f(toasts))
  setTimeout(() => { toasts = toasts.filter((x) => x.id !== t.id); toastSubs.forEach((f) => f(toasts)) }, kind === 'error' ? 8000 : 4000)
}
export function Toasts() {
  const [list, set] = useState<Toast[]>(toasts)
  useEffect(() => { toastSubs.add(set); return () => { toastSubs.delete(set) } }, [])
  return (
    <div class="toasts" role="status" aria-live="polite">
      {list.map((t) => <div key={t.id} class={`toast ${t.kind}`}>{t.text}</div>)}
    </div>
  )
}

// act runs an action, reports its outcome as a toast and returns whether it worked.
export async function act(label: string, f: () => Promise<unknown>, ok?: (r: unknown) => string): Promise<boolean> {
  try {
    const r = await f()
    toast(ok ? ok(r) : label)
    return true
  } catch (e) {
    toast(`${label} failed: ${(e as Error).message}`, 'error')
    return false
  }
}
