import { api, type ClusterStatus, type JobRow, type Queue, type Worker } from '../api'
import { useLive } from '../live'
import { href } from '../router'
import { fmtAgo, fmtAttemptShort, fmtDuration, fmtNum, fmtRate, shortId } from '../format'
import { isConnected } from '../workers'
import { history, loadHistory, recordQueues, totals, ALL } from '../queues'
import { Chart, PALETTE } from '../components/charts'
import { Empty, ErrorNote, Stat, StateBadge } from '../components/ui'
import { QueueTable } from './Queues'

interface DashData {
  workerList: Worker[]
  cluster: ClusterStatus | null
  queues: Queue[]
  oldest: JobRow | null
  failures: JobRow[]
  workers: number
  activeWorkers: number
  nodes: number | null
}

async function loadDash(signal: AbortSignal): Promise<DashData> {
  const [queues, oldest, failures, workers, cluster] = await Promise.all([
    api.queues(signal),
    api.search({ state: ['pending'], sort: 'created_at', order: 'asc', limit: 1 }, signal).then((p) => p.jobs[0] ?? null, () => null),
    api.search({ state: ['retrying', 'dead'], has_errors: true, limit: 8 }, signal).then((p) => p.jobs, () => []),
    api.workers(signal).catch(() => []),
    api.cluster(signal).catch(() => null),
    loadHistory(signal),
  ])
  const now = Date.now()
  const oldestAge = oldest ? Math.max(0, now - Date.parse(oldest.created_at)) / 1000 : 0
  recordQueues(queues, now / 1000, { [`${ALL}|oldest`]: oldestAge })
  return {
    workerList: [...workers].sort((a, b) => b.last_seen.localeCompare(a.last_seen)),
    cluster,
    queues, oldest, failures,
    workers: workers.length,
    activeWorkers: workers.filter((w) => isConnected(w, now)).length,
    nodes: cluster ? cluster.nodes.length : null,
  }
}

export function Dashboard() {
  const { data, error } = useLive(loadDash, 'dash', { pollLiveMs: 3000, pollOfflineMs: 2000, minGapMs: 1000 })
  const t = data ? totals(data.queues) : null
  const oldestMs = data?.oldest ? Date.now() - Date.parse(data.oldest.created_at) : 0
  const top = data ? [...data.queues].sort((a, b) => (b.totals?.completed ?? b.completed) - (a.totals?.completed ?? a.completed)).slice(0, 6) : []
  const last = (k: string) => { const c = history.cols.get(k); return c && c.length ? c[c.length - 1] ?? 0 : 0 }

  return (
    <section aria-labelledby="h-dash">
      <div class="page-head">
        <h1 id="h-dash">Dashboard</h1>
        {data && <span class="muted">{data.nodes && data.nodes > 1 ? `cluster: ${data.nodes} nodes` : 'single node'}</span>}
      </div>
      <ErrorNote error={error} />
      <div class="stats" aria-label="Totals">
        <Stat label="Pending" value={t ? fmtNum(t.pending) : '…'} testid="stat-pending" link="/jobs?state=pending" />
        <Stat label="Active" value={t ? fmtNum(t.active) : '…'} testid="stat-active" link="/jobs?state=active" tone="info" />
        <Stat label="Scheduled" value={t ? fmtNum(t.scheduled) : '…'} testid="stat-scheduled" link="/jobs?state=scheduled" />
        <Stat label="Retrying" value={t ? fmtNum(t.retrying) : '…'} testid="stat-retrying" link="/jobs?state=retrying" tone={t && t.retrying > 0 ? 'warn' : ''} />
        <Stat label="Held" value={t ? fmtNum(t.held) : '…'} hint="waiting on dependencies" testid="stat-held" link="/held" />
        <Stat label="Dead" value={t ? fmtNum(t.dead) : '…'} testid="stat-dead" link="/dead" tone={t && t.dead > 0 ? 'bad' : ''} />
        <Stat label="Completed" value={t ? fmtNum(t.completed) : '…'} testid="stat-completed" tone="good" />
        <Stat label="Queues" value={data ? String(data.queues.length) : '…'} hint={t && t.paused ? `${t.paused} paused` : undefined} testid="stat-queues" link="/queues" />
        <Stat label="Workers" value={data ? String(data.activeWorkers) : '…'} hint={data ? `${data.workers} seen in 24h` : undefined} testid="stat-workers" link="/workers" />
        <Stat label="Latency" value={data ? (data.oldest ? fmtDuration(oldestMs) : '0') : '…'} hint="oldest pending job" testid="stat-latency" tone={oldestMs > 60_000 ? 'warn' : ''} />
      </div>

      <div class="charts">
        <Chart
          title="Throughput, all queues (jobs/s)"
          summary={`now ${fmtRate(last(`${ALL}|done`))} completed, ${fmtRate(last(`${ALL}|enq`))} enqueued, ${fmtRate(last(`${ALL}|fail`))} failed`}
          series={[{ label: 'enqueued', color: PALETTE[0] }, { label: 'completed', color: PALETTE[1], fill: true }, { label: 'failed', color: PALETTE[2] }]}
          data={history.data([`${ALL}|enq`, `${ALL}|done`, `${ALL}|fail`])}
        />
        <Chart
          title="Completed per queue (jobs/s)"
          summary={top.map((q) => `${q.name} ${fmtRate(last(`${q.name}|done`))}`).join(', ') || 'no queues'}
          series={top.map((q, i) => ({ label: q.name, color: PALETTE[i % PALETTE.length] }))}
          data={history.data(top.map((q) => `${q.name}|done`))}
        />
        <Chart
          title="Queue depth (jobs)"
          summary={`${fmtNum(last(`${ALL}|pending`))} pending, ${fmtNum(last(`${ALL}|active`))} active`}
          series={[{ label: 'pending', color: PALETTE[0], fill: true }, { label: 'active', color: PALETTE[4] }, { label: 'scheduled+retrying', color: PALETTE[3] }]}
          data={history.data([`${ALL}|pending`, `${ALL}|active`, `${ALL}|waiting`])}
        />
        <Chart
          title="Latency: age of the oldest pending job"
          summary={fmtDuration(oldestMs)}
          unit={(v) => (v < 10 ? `${+v.toFixed(1)}s` : v < 60 ? `${Math.round(v)}s` : v < 3600 ? `${(v / 60).toFixed(1)}m` : `${(v / 3600).toFixed(1)}h`)}
          series={[{ label: 'oldest pending', color: PALETTE[3], fill: true }]}
          data={history.data([`${ALL}|oldest`])}
        />
      </div>

      <h2>Queues</h2>
      {data && (data.queues.length ? <QueueTable queues={data.queues} compact /> : <Empty>No queues yet. Enqueue a job to create one.</Empty>)}

      <div class="two-col">
        <div>
          <h2>Workers {data && <span class="muted small">({data.activeWorkers} connected)</span>}</h2>
          {data && (data.workerList.length ? (
            <div class="table-wrap">
              <table class="grid">
                <thead><tr><th scope="col">Worker</th><th scope="col" class="hide-sm">Host</th><th scope="col" class="num">Jobs</th><th scope="col">Last seen</th></tr></thead>
                <tbody>
                  {data.workerList.slice(0, 5).map((w) => (
                    <tr key={w.id}><th scope="row">{w.id}</th><td class="hide-sm">{w.hostname || '—'}</td><td class="num">{w.active_jobs}</td><td>{fmtAgo(w.last_seen)}</td></tr>
                  ))}
                </tbody>
              </table>
            </div>
          ) : <Empty>No workers yet.</Empty>)}
          {data && data.workerList.length > 5 && <p class="small"><a href={href('/workers')}>All {data.workerList.length} workers →</a></p>}
        </div>
        <div>
          <h2>Cluster</h2>
          {data && (data.cluster ? (
            <div class="table-wrap">
              <table class="grid">
                <thead><tr><th scope="col">Node</th><th scope="col">Leads</th><th scope="col">Status</th></tr></thead>
                <tbody>
                  {data.cluster.nodes.map((n) => (
                    <tr key={String(n.node_id)}><th scope="row">{n.name ? `${n.name} (${n.node_id})` : String(n.node_id)}</th><td>{n.leader_of.length} shard{n.leader_of.length === 1 ? '' : 's'}</td><td><span class={`badge ${n.status === 'up' ? 's-completed' : 's-dead'}`}>{n.status}</span></td></tr>
                  ))}
                </tbody>
              </table>
            </div>
          ) : <Empty>Single node: this server runs every shard. <a href={href('/cluster')}>Details</a></Empty>)}
        </div>
      </div>

      <h2>Recent failures</h2>
      {data && (data.failures.length ? (
        <ul class="failures">
          {data.failures.map((j) => (
            <li key={j.id}>
              <a href={href(`/jobs/${encodeURIComponent(j.id)}`)} class="mono">{shortId(j.id)}</a>
              <a href={href(`/queues/${encodeURIComponent(j.queue)}`)}>{j.queue}</a>
              <StateBadge state={j.state} />
              <span class="err">{j.last_error ?? j.reason ?? ''}</span>
              <span class="muted">attempt {fmtAttemptShort(j.attempt, j.max_retries)}</span>
              <span class="muted" title={j.completed_at ? 'died' : 'created'}>{fmtAgo(j.completed_at ?? j.created_at)}</span>
            </li>
          ))}
        </ul>
      ) : <Empty>No failing jobs.</Empty>)}
    </section>
  )
}
