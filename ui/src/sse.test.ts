import { describe, expect, it } from 'vitest'
import { backoffDelay, openStream, SSEParser, type SSEFrame, type StreamStatus } from './sse'

describe('SSEParser', () => {
  it('parses frames split across chunks, with ids, events, comments and multi-line data', () => {
    const p = new SSEParser()
    const out: SSEFrame[] = []
    out.push(...p.push(': keepalive\n\nid: c1\nevent: job\nda'))
    expect(out).toEqual([])
    out.push(...p.push('ta: {"type":"enqueued"}\n\n'))
    out.push(...p.push('event: reset\r\ndata: a\r\ndata: b\r\n\r\n'))
    out.push(...p.push('data:nospace\n\n'))
    expect(out).toEqual([
      { id: 'c1', event: 'job', data: '{"type":"enqueued"}' },
      { event: 'reset', data: 'a\nb' },
      { event: 'message', data: 'nospace' },
    ])
  })

  it('waits for the LF of a CRLF split across chunks', () => {
    const p = new SSEParser()
    expect(p.push('data: x\r')).toEqual([])
    expect(p.push('\n\r\n')).toEqual([{ event: 'message', data: 'x' }])
  })

  it('ignores a keepalive-only stream and unknown fields', () => {
    const p = new SSEParser()
    expect(p.push(': keepalive\n\nretry: 10\nfoo: bar\n\n')).toEqual([])
  })
})

describe('backoffDelay', () => {
  it('doubles from 0.5 s up to 30 s, jittered ±20 %', () => {
    const mid = () => 0.5
    expect([0, 1, 2, 3, 4, 5, 6, 7, 20].map((n) => backoffDelay(n, mid))).toEqual([500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000])
    expect(backoffDelay(0, () => 0)).toBe(400)
    expect(backoffDelay(0, () => 1)).toBe(600)
  })
})

function streamOf(chunks: string[], endWithError = false): Response {
  const enc = new TextEncoder()
  let i = 0
  const body = new ReadableStream<Uint8Array>({
    pull(c) {
      if (i < chunks.length) c.enqueue(enc.encode(chunks[i++]))
      else if (endWithError) c.error(new Error('reset by peer'))
      else c.close()
    },
  })
  return new Response(body, { status: 200, headers: { 'Content-Type': 'text/event-stream' } })
}

describe('openStream', () => {
  it('reconnects with growing backoff, resumes from the last id, and resets the backoff after a frame', async () => {
    const calls: (string | undefined)[] = []
    const responses: (() => Response | Promise<Response>)[] = [
      () => Promise.reject(new TypeError('connection refused')),
      () => new Response('nope', { status: 503 }),
      () => streamOf(['id: 7\nevent: job\ndata: {"type":"started"}\n\n'], true),
      () => streamOf(['id: 8\nevent: job\ndata: {"type":"completed"}\n\n']),
    ]
    const timers: { fn: () => void; ms: number }[] = []
    const frames: SSEFrame[] = []
    const statuses: [StreamStatus, number | undefined][] = []
    let stop: () => void = () => {}
    const done = new Promise<void>((resolve) => {
      stop = openStream({
        url: '/api/v1/events',
        rand: () => 0.5,
        fetchImpl: (async (_u: string, init: RequestInit) => {
          calls.push((init.headers as Record<string, string>)['Last-Event-ID'])
          const r = responses.shift()
          if (!r) { resolve(); return new Promise(() => {}) }
          return r()
        }) as unknown as typeof fetch,
        setTimer: (fn, ms) => { timers.push({ fn, ms }); queueMicrotask(fn); return timers.length },
        clearTimer: () => {},
        onFrame: (f) => frames.push(f),
        onStatus: (s, ms) => statuses.push([s, ms]),
      })
    })
    await done
    stop()
    expect(calls).toEqual([undefined, undefined, undefined, '7', '8'])
    expect(frames.map((f) => f.id)).toEqual(['7', '8'])
    // 500, 1000 after two failures; a frame resets the count, so 500 again after each good stream.
    expect(timers.map((t) => t.ms)).toEqual([500, 1000, 500, 500])
    expect(statuses.filter(([s]) => s === 'open').length).toBe(2)
  })

  it('forgets a resume point the server rejects, and tells the views to refetch', async () => {
    const calls: (string | undefined)[] = []
    const frames: SSEFrame[] = []
    const responses = [
      () => streamOf(['id: old\nevent: job\ndata: {}\n\n']),
      () => new Response('{"code":"invalid_request"}', { status: 400 }),
      () => streamOf(['id: new\nevent: job\ndata: {}\n\n']),
    ]
    let stop: () => void = () => {}
    await new Promise<void>((resolve) => {
      stop = openStream({
        url: '/e',
        fetchImpl: (async (_u: string, init: RequestInit) => {
          calls.push((init.headers as Record<string, string>)['Last-Event-ID'])
          const r = responses.shift()
          if (!r) { resolve(); return new Promise(() => {}) }
          return r()
        }) as unknown as typeof fetch,
        setTimer: (fn) => { queueMicrotask(fn); return 1 },
        clearTimer: () => {},
        onFrame: (f) => frames.push(f),
      })
    })
    stop()
    expect(calls).toEqual([undefined, 'old', undefined, 'new'])
    expect(frames.map((f) => f.event)).toEqual(['job', 'reset', 'job'])
  })

  it('stops reconnecting once stopped', async () => {
    let n = 0
    const timers: (() => void)[] = []
    const stop = openStream({
      url: '/x',
      fetchImpl: (async () => { n++; throw new Error('down') }) as unknown as typeof fetch,
      setTimer: (fn) => { timers.push(fn); return 1 },
      clearTimer: () => {},
      onFrame: () => {},
    })
    await new Promise((r) => setTimeout(r, 0))
    expect(n).toBe(1)
    stop()
    timers.forEach((f) => f())
    await new Promise((r) => setTimeout(r, 0))
    expect(n).toBe(1)
  })
})
