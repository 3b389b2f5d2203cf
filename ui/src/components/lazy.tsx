// lazy: a component whose module is loaded on its first render, as a
// chunk of its own (pages few people open, the chart library), so the
// first page paints from a smaller bundle.
import type { ComponentType, JSX } from 'preact'
import { useEffect, useState } from 'preact/hooks'

export function lazy<P extends object>(load: () => Promise<ComponentType<P>>, fallback?: (props: P) => JSX.Element): ComponentType<P> {
  let loaded: ComponentType<P> | null = null
  let pending: Promise<ComponentType<P>> | null = null
  const get = () => {
    pending ??= load().then((c) => (loaded = c), (e: unknown) => { pending = null; throw e }) // a failed load is tried again on the next mount
    return pending
  }
  return function Lazy(props: P) {
    const [C, setC] = useState<ComponentType<P> | null>(() => loaded)
    const [error, setError] = useState<Error | null>(null)
    useEffect(() => {
      if (C) return
      let mounted = true
      get().then((c) => { if (mounted) setC(() => c) }, (e: Error) => { if (mounted) setError(e) })
      return () => { mounted = false }
    }, [])
    if (C) return <C {...props} />
    if (error) return <p class="error-note" role="alert">This part of the console did not load ({error.message}). Reload the page to try again.</p>
    return fallback ? fallback(props) : <p class="muted loading" role="status">Loading…</p>
  }
}
