import { afterEach, describe, expect, it, vi } from 'vitest'
import { api } from './api'

describe('api calls', () => {
  afterEach(() => vi.unstubAllGlobals())

  it('declares JSON on every call but a GET, even without a body (the server answers 415 otherwise)', async () => {
    const seen: [string, string, string | undefined][] = []
    vi.stubGlobal('fetch', vi.fn(async (u: string, init: RequestInit) => {
      seen.push([init.method as string, u, (init.headers as Record<string, string>)['Content-Type']])
      return new Response('{"queues":[]}', { status: 200 })
    }))
    await api.pause('q')
    await api.cancel('j')
    await api.deleteJob('j')
    await api.queues()
    expect(seen).toEqual([
      ['POST', '/api/v1/queues/q/pause', 'application/json'],
      ['POST', '/api/v1/jobs/j/cancel', 'application/json'],
      ['DELETE', '/api/v1/jobs/j', 'application/json'],
      ['GET', '/api/v1/queues', undefined],
    ])
  })
})
