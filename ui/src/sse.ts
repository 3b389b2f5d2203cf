// Server-sent events over fetch (not EventSource): we need our own
// exponential backoff and to send Last-Event-ID on every reconnect, which
// EventSource does not let a page control.

export interface SSEFrame { id?: string; event: string; data: string }

// SSEParser turns chunks of an event stream into frames (the WHATWG
// event-stream rules: fields per line, a blank line ends a frame, lines that
// start with ':' are comments, CRLF/CR/LF all end lines).
export class SSEParser {
  private buf = ''
  private data: string[] = []
  private event = ''
  private id: string | undefined
  private sawField = false

  push(chunk: string): SSEFrame[] {
    this.buf += chunk
    const out: SSEFrame[] = []
    for (;;) {
      const m = /\r\n|\r|\n/.exec(this.buf)
      if (!m) break
      // A lone CR at the end may be the first half of a CRLF: wait for more.
      if (m[0] === '\r' && m.index === this.buf.length - 1) break
      const line = this.buf.slice(0, m.index)
      this.buf = this.buf.slice(m.index + m[0].length)
      const f = this.line(line)
      if (f) out.push(f)
    }
    return out
  }

  private line(line: string): SSEFrame | null {
    if (line === '') {
      if (!this.sawField) return null
      const f: SSEFrame = { event: this.event || 'message', data: this.data.join('\n') }
      if (this.id !== undefined) f.id = this.id
      this.data = []; this.event = ''; this.id = undefined; this.sawField = false
      return f
    }
    if (line.startsWith(':')) return null
    const i = line.indexOf(':')
    const name = i < 0 ? line : line.slice(0, i)
    let value = i < 0 ? '' : line.slice(i + 1)
    if (value.startsWith(' ')) value = value.slice(1)
    switch (name) {
      case 'data': this.data.push(value); this.sawField = true; break
      case 'event': this.event = value; this.sawField = true; break
      case 'id': if (!value.includes('\0')) { this.id = value; this.sawField = true } break
    }
    return null
  }
}

// backoffDelay is the wait before reconnect attempt n (0-based): 0.5 s
// doubling to at most 30 s, with ±20 % jitter so a restarted server is not
// hit by every tab at once.
export function backoffDelay(n: number, rand: () => number = Math.random): number {
  const base = Math.min(30_000, 500 * 2 ** Math.min(n, 16))
  return Math.round(base * (0.8 + 0.4 * rand()))
}

export type StreamStatus = 'connecting' | 'open' | 'waiting'

export interface StreamOptions {
  url: string
  onFrame: (f: SSEFrame) => void
  onStatus?: (s: StreamStatus, retryInMs?: number) => void
  fetchImpl?: typeof fetch
  setTimer?: (fn: () => void, ms: number) => unknown
  clearTimer?: (t: unknown) => void
  rand?: () => number
}

// openStream keeps an SSE stream open until the returned function is
// called: it reconnects with backoffDelay after any error or end of stream,
// resuming from the last frame id it saw; a frame received resets the
// backoff.
export function openStream(o: StreamOptions): () => void {
  const doFetch = o.fetchImpl ?? fetch.bind(globalThis)
  const setTimer = o.setTimer ?? ((fn, ms) => setTimeout(fn, ms))
  const clearTimer = o.clearTimer ?? ((t) => clearTimeout(t as ReturnType<typeof setTimeout>))
  let lastId: string | undefined
  let attempt = 0
  let stopped = false
  let ctrl: AbortController | null = null
  let timer: unknown = null

  const retry = () => {
    if (stopped) return
    const ms = backoffDelay(attempt++, o.rand)
    o.onStatus?.('waiting', ms)
    timer = setTimer(() => { timer = null; void connect() }, ms)
  }

  const connect = async () => {
    if (stopped) return
    o.onStatus?.('connecting')
    ctrl = new AbortController()
    const headers: Record<string, string> = { Accept: 'text/event-stream' }
    if (lastId !== undefined) headers['Last-Event-ID'] = lastId
    try {
      const res = await doFetch(o.url, { headers, signal: ctrl.signal, cache: 'no-store' })
      if (res.status === 400 && lastId !== undefined) {
        // The server does not know our resume point (it restarted, or this
        // is another node): start from now and have every view refetch.
        lastId = undefined
        o.onFrame({ event: 'reset', data: '' })
      }
      if (!res.ok || !res.body) throw new Error('HTTP ' + res.status)
      o.onStatus?.('open')
      const reader = res.body.getReader()
      const dec = new TextDecoder()
      const p = new SSEParser()
      for (;;) {
        const { value, done } = await reader.read()
        if (done) break
        for (const f of p.push(dec.decode(value, { stream: true }))) {
          attempt = 0
          if (f.id !== undefined) lastId = f.id
          o.onFrame(f)
        }
      }
    } catch {
      // fall through to retry
    }
    retry()
  }

  void connect()
  return () => {
    stopped = true
    ctrl?.abort()
    if (timer !== null) clearTimer(timer)
  }
}
