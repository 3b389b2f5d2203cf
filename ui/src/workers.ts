// When a worker counts as connected. GET /api/v1/workers tells when each
// worker was last heard from (a fetch or a heartbeat) and how many jobs it
// holds. A worker is connected while it was heard within HEARD_MS, or
// while it still holds active jobs: a job's lease can be far longer than
// the heartbeat interval, and a worker busy on one is not gone. When it
// really is gone its leases expire, the server reclaims the jobs, and it
// stops counting.
import type { Worker } from './api'

export const HEARD_MS = 60_000

export type WorkerStatus = 'connected' | 'busy' | 'gone'

// workerStatus: 'connected' (heard within HEARD_MS), 'busy' (quiet, but
// holding jobs) or 'gone'.
export function workerStatus(w: Worker, now = Date.now()): WorkerStatus {
  const t = Date.parse(w.last_seen)
  if (!Number.isNaN(t) && now - t < HEARD_MS) return 'connected'
  return w.active_jobs > 0 ? 'busy' : 'gone'
}

export function isConnected(w: Worker, now = Date.now()): boolean {
  return workerStatus(w, now) !== 'gone'
}
