import { api, ApiError, type ClusterShard, type ClusterStatus, type Health } from '../api'
import { useLive } from '../live'
import { fmtInt } from '../format'
import { act, ErrorNote, Stat } from '../components/ui'

type ClusterData = { status: ClusterStatus | null; health: Health }

async function load(s: AbortSignal): Promise<ClusterData> {
  const health = await api.health(s)
  try {
    return { status: await api.cluster(s), health }
  } catch (e) {
    if (e instanceof ApiError && e.status === 404) return { status: null, health }
    throw e
  }
}

const ms = (v: number) => (v >= 100 ? Math.round(v).toString() : v.toFixed(1))

function ShardRow({ s, label }: { s: ClusterShard; label: string }) {
  const lat = s.proposal_latency_ms
  return (
    <tr>
      <th scope="row">{label}</th>
      <td>{String(s.leader_node)}</td>
      <td class="hide-sm">{s.term ?? '—'}</td>
      <td>{s.replicas.map((r) => (
        <span key={String(r.node_id)} class={`tag ${(r.lag ?? 0) > 100 ? 'warn' : ''}`} title={r.role}>
          {String(r.node_id)}{r.role === 'leader' ? ' ★' : ''}{r.role === 'learner' ? ' (learner)' : ''}{r.applied_index !== undefined ? ` · ${fmtInt(r.applied_index)}` : ''}{r.lag !== undefined ? ` · lag ${fmtInt(r.lag)}` : ''}
        </span>
      ))}</td>
      <td class="hide-sm">{lat && (lat.samples ?? 1) > 0 ? `${ms(lat.p50)} / ${ms(lat.p90)} / ${ms(lat.p99)} ms` : '—'}</td>
    </tr>
  )
}

export function ClusterPage() {
  const { data, error } = useLive(load, 'cluster', { match: () => false, pollLiveMs: 5000, pollOfflineMs: 5000 })
  const st = data?.status
  const single = !st || st.nodes.length === 1
  return (
    <section aria-labelledby="h-cluster">
      <div class="page-head">
        <h1 id="h-cluster">Cluster</h1>
        <div class="head-actions">
          <button class="btn small" title="Rebuild this node's search index (the SQLite mirror) from the shards" onClick={() => act('Rebuilding the search index', () => api.rebuildMirror())}>Rebuild search index</button>
        </div>
      </div>
      <ErrorNote error={error} />
      {data && single && (
        <p data-testid="single-node"><strong>Single node.</strong> This server runs every shard itself{st ? '' : ' and has no cluster peers'}; start others with <code>corvo server --join</code> to make a cluster.</p>
      )}
      {data && !st && (
        <div class="stats">
          <Stat label="Shards" value={String(data.health.shards)} />
          <Stat label="Shards led here" value={String(data.health.shards_led)} tone={data.health.shards_led === data.health.shards ? 'good' : 'warn'} />
          <Stat label="Health" value={data.health.status} tone={data.health.status === 'ok' ? 'good' : 'bad'} />
        </div>
      )}
      {st && (
        <>
          <div class="stats">
            <Stat label="Nodes up" value={`${st.nodes.filter((n) => n.status === 'up').length}/${st.nodes.length}`} tone={st.nodes.every((n) => n.status === 'up') ? 'good' : 'bad'} testid="cluster-nodes" />
            <Stat label="Shards" value={String(st.shard_count ?? st.shards.length)} hint={replicaHint(st)} />
            <Stat label="This node" value={String(st.node_id)} />
            {st.mirror && <Stat label="Search index lag" value={fmtInt(st.mirror.lag_entries)} hint="entries" tone={st.mirror.lag_entries > 1000 ? 'warn' : ''} />}
          </div>
          <h2>Nodes</h2>
          <div class="table-wrap">
            <table class="grid">
              <thead><tr><th scope="col">Node</th><th scope="col">HTTP</th><th scope="col" class="hide-sm">Raft</th><th scope="col">Leads shards</th><th scope="col" class="num hide-sm">Index lag</th><th scope="col">Status</th></tr></thead>
              <tbody>
                {st.nodes.map((n) => (
                  <tr key={String(n.node_id)}>
                    <th scope="row">{n.name ? `${n.name} (${n.node_id})` : String(n.node_id)}{String(n.node_id) === String(st.node_id) ? ' · this node' : ''}</th>
                    <td class="mono small">{n.http_address}</td>
                    <td class="mono small hide-sm">{n.raft_address}</td>
                    <td>{n.leader_of.length ? n.leader_of.join(', ') : '—'}</td>
                    <td class="num hide-sm">{n.mirror_lag_entries !== undefined ? fmtInt(n.mirror_lag_entries) : '—'}</td>
                    <td><span class={`badge ${n.status === 'up' ? 's-completed' : 's-dead'}`}>{n.status}</span></td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
          <h2>Shards</h2>
          <div class="table-wrap">
            <table class="grid">
              <thead><tr><th scope="col">Shard</th><th scope="col">Leader</th><th scope="col" class="hide-sm">Term</th><th scope="col">Replicas (applied · lag)</th><th scope="col" class="hide-sm">Proposal p50 / p90 / p99</th></tr></thead>
              <tbody>
                {st.shards.map((s) => <ShardRow key={s.shard_id} s={s} label={String(s.shard_id)} />)}
                {st.meta && <ShardRow s={st.meta} label="meta" />}
              </tbody>
            </table>
          </div>
        </>
      )}
    </section>
  )
}

// replicaHint states how many replicas the shards actually have (the
// fewest of any shard), not the configured --replicas target.
export function replicaHint(st: ClusterStatus): string | undefined {
  if (!st.shards.length) return undefined
  const n = Math.min(...st.shards.map((s) => s.replicas.filter((r) => r.role !== 'learner').length))
  return `${n} ${n === 1 ? 'replica' : 'replicas'} each`
}
