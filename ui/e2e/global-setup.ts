// Starts a real corvo server (the built bin/corvo) in a temp dir on free
// 127.0.0.1 ports for the browser tests, and stops it afterwards.
import { spawn, type ChildProcess } from 'node:child_process'
import { mkdtempSync, rmSync, existsSync, openSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'

function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const s = createServer()
    s.once('error', fail)
    s.listen(0, '127.0.0.1', () => {
      const a = s.address()
      const port = typeof a === 'object' && a ? a.port : 0
      s.close(() => ok(port))
    })
  })
}

async function waitHealthy(url: string, proc: ChildProcess, ms: number) {
  const deadline = Date.now() + ms
  while (Date.now() < deadline) {
    if (proc.exitCode !== null) throw new Error(`corvo exited with ${proc.exitCode}`)
    try {
      const r = await fetch(url + '/healthz')
      if (r.ok) {
        const h = (await r.json()) as { shards: number; shards_led: number }
        if (h.shards_led === h.shards) return
      }
    } catch { /* not up yet */ }
    await new Promise((r) => setTimeout(r, 100))
  }
  throw new Error('corvo did not become healthy in time')
}

export interface StartedServer { url: string; dir: string; stop: () => Promise<void> }

// startServer runs bin/corvo on free loopback ports in a new temp dir,
// with extra server flags and environment, until stop. "{url}" in a flag
// becomes the server's own URL (e.g. for --oidc-redirect-url).
export async function startServer(extra: string[] = [], env: Record<string, string> = {}): Promise<StartedServer> {
  const bin = resolve(process.env.CORVO_BIN ?? '../bin/corvo') // make runs this from ui/
  if (!existsSync(bin)) throw new Error(`${bin} is missing: run make build first`)
  const dir = mkdtempSync(join(tmpdir(), 'corvo-ui-e2e-'))
  const [http, raft] = [await freePort(), await freePort()]
  const log = openSync(join(dir, 'server.log'), 'a')
  const args = extra.map((a) => a.replaceAll('{url}', `http://127.0.0.1:${http}`))
  const proc = spawn(bin, ['server', '--bind', `127.0.0.1:${http}`, '--raft-bind', `127.0.0.1:${raft}`, '--data-dir', join(dir, 'data'), '--log-level', 'warn', ...args], {
    stdio: ['ignore', log, log],
    env: { ...process.env, ...env },
  })
  const url = `http://127.0.0.1:${http}`
  await waitHealthy(url, proc, 60_000)
  return {
    url, dir,
    stop: async () => {
      proc.kill('SIGTERM')
      await new Promise<void>((r) => { if (proc.exitCode !== null) r(); else proc.once('exit', () => r()) })
      rmSync(dir, { recursive: true, force: true })
    },
  }
}

export default async function globalSetup() {
  if (process.env.CORVO_E2E_URL) return // an already running server
  const s = await startServer()
  process.env.CORVO_E2E_URL = s.url
  process.env.CORVO_E2E_DIR = s.dir
  return s.stop
}
