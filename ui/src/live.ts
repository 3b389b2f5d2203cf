// Live updates: one SSE connection per tab to /api/v1/events, shared by
// every view. Views load their data with useLive, which reloads on matching
// events (coalesced to at most one reload per `minGapMs`) and polls as a
// fallback — often while the stream is down, rarely while it is up.
import { useCallback, useEffect, useRef, useState } from 'preact/hooks'
import { openStream, type StreamStatus } from './sse'

export interface JobEvent {
  type: string
  job_id: string
  queue: string
  state?: string
  attempt?: number
  at?: string
  worker_id?: string
  error?: string
  progress?: { current?: number; total?: number; message?: string }
  moved_to?: string
}

type Listener = (e: JobEvent | 'reset') => void
export interface LiveStatus { state: StreamStatus | 'off' | 'busy'; retryInMs?: number; since: number }

// RateGate says when the stream carries more events than a tab should
// digest (every view only needs "something changed"): over `limit` events
// a second for `seconds` seconds in a row.
export class RateGate {
  private windowStart = 0
  private count = 0
  private hot = 0
  constructor(readonly limit = 300, readonly seconds = 3) {}
  hit(nowMs: number): boolean {
    if (nowMs - this.windowStart >= 1000) {
      const over = this.count > this.limit
      // A window with no events at all in between resets the streak.
      this.hot = over && nowMs - this.windowStart < 2000 ? this.hot + 1 : over ? 1 : 0
      this.windowStart = nowMs
      this.count = 0
    }
    this.count++
    return this.hot >= this.seconds
  }
}

// While busy the views poll; the stream is tried again after this long.
export const BUSY_PAUSE_MS = 60_000

const listeners = new Set<Listener>()
const statusListeners = new Set<(s: LiveStatus) => void>()
let status: LiveStatus = { state: 'off', since: Date.now() }
let stop: (() => void) | null = null

function setStatus(s: LiveStatus) {
  status = s
  statusListeners.forEach((l) => l(s))
}

export function emit(e: JobEvent | 'reset') {
  listeners.forEach((l) => l(e))
}

export function startLive(url = '/api/v1/events') {
  if (stop) return
  const gate = new RateGate()
  stop = openStream({
    url,
    onStatus: (s, retryInMs) => setStatus({ state: s, retryInMs, since: Date.now() }),
    onFrame: (f) => {
      if (gate.hit(Date.now())) {
        // Too many events to be useful: poll for a while instead.
        stop?.()
        stop = null
        setStatus({ state: 'busy', since: Date.now() })
        setTimeout(() => { if (status.state === 'busy') startLive(url) }, BUSY_PAUSE_MS)
        emit('reset')
        return
      }
      if (f.event === 'reset') { emit('reset'); return }
      if (f.event !== 'job' && f.event !== 'message') return
      try {
        const e = JSON.parse(f.data) as JobEvent
        if (e && typeof e.type === 'string') emit(e)
      } catch { /* a frame we do not understand */ }
    },
  })
}

export function stopLive() {
  stop?.()
  stop = null
  setStatus({ state: 'off', since: Date.now() })
}

export function subscribe(l: Listener): () => void {
  listeners.add(l)
  return () => { listeners.delete(l) }
}

export function useLiveStatus(): LiveStatus {
  const [s, set] = useState(status)
  useEffect(() => {
    statusListeners.add(set)
    set(status)
    return () => { statusListeners.delete(set) }
  }, [])
  return s
}

export interface LiveOptions {
  // Which events make this view reload; default: every event.
  match?: (e: JobEvent) => boolean
  // Poll interval while the stream is open / while it is not.
  pollLiveMs?: number
  pollOfflineMs?: number
  // Smallest gap between two reloads caused by events.
  minGapMs?: number
  onEvent?: (e: JobEvent) => void
}

export interface Loaded<T> {
  data: T | undefined
  error: Error | undefined
  loading: boolean
  reload: () => void
  updatedAt: number
}

// useLive loads data with `load` and keeps it fresh. `key` changes restart it.
export function useLive<T>(load: (signal: AbortSignal) => Promise<T>, key: string, opts: LiveOptions = {}): Loaded<T> {
  const [data, setData] = useState<T | undefined>(undefined)
  const [error, setError] = useState<Error | undefined>(undefined)
  const [loading, setLoading] = useState(true)
  const [updatedAt, setUpdatedAt] = useState(0)
  const live = useLiveStatus()
  const loadRef = useRef(load)
  loadRef.current = load
  const optsRef = useRef(opts)
  optsRef.current = opts
  const state = useRef({ inflight: null as AbortController | null, again: false, last: 0, timer: 0 as unknown as ReturnType<typeof setTimeout> | 0 })

  const run = useCallback(() => {
    const st = state.current
    if (st.inflight) { st.again = true; return }
    const ctrl = new AbortController()
    st.inflight = ctrl
    st.last = Date.now()
    loadRef.current(ctrl.signal).then(
      (d) => { if (!ctrl.signal.aborted) { setData(d); setError(undefined); setUpdatedAt(Date.now()) } },
      (e: Error) => { if (!ctrl.signal.aborted) setError(e) },
    ).finally(() => {
      if (ctrl.signal.aborted) return
      st.inflight = null
      setLoading(false)
      if (st.again) { st.again = false; run() }
    })
  }, [])

  // Reset and load when the key changes.
  useEffect(() => {
    setData(undefined); setError(undefined); setLoading(true)
    run()
    const st = state.current
    return () => {
      st.inflight?.abort(); st.inflight = null; st.again = false
      if (st.timer) { clearTimeout(st.timer); st.timer = 0 }
    }
  }, [key, run])

  // Reload on events, coalesced.
  useEffect(() => subscribe((e) => {
    const o = optsRef.current
    if (e !== 'reset') {
      o.onEvent?.(e)
      if (o.match && !o.match(e)) return
    }
    const st = state.current
    if (st.timer) return
    const gap = o.minGapMs ?? 1000
    const wait = Math.max(0, st.last + gap - Date.now())
    st.timer = setTimeout(() => { st.timer = 0; run() }, wait)
  }), [key, run])

  // Poll.
  const isLive = live.state === 'open'
  useEffect(() => {
    const ms = isLive ? (optsRef.current.pollLiveMs ?? 15_000) : (optsRef.current.pollOfflineMs ?? 3_000)
    const t = setInterval(() => { if (!document.hidden) run() }, ms)
    return () => clearInterval(t)
  }, [key, run, isLive])

  return { data, error, loading, reload: run, updatedAt }
}
