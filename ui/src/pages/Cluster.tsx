import { api, ApiError, type ClusterStatus, type Health } from '../api'
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

export function ClusterPage() {
  const { data, error } = useLive(load, 'cluster', { match: () => false, pollLiveMs: 5000, pollOfflineMs: 5000 })
  const st = data?.status
  return (
    <section aria-labelledby="h-cluster">
      <div class="page-head">
        <h1 id="h-cluster">Cluster</h1>
        <div class="head-actions">
          <button class="btn small" title="Rebuild this node's search index (the SQLite mirror) from the shards" onClick={() => act('Rebuilding the search index', () => api.rebuildMirror())}>Rebuild search index</button>
        </div>
      </div>
      <ErrorNote error={error} />
      {data && !st && (
        <div data-testid="single-node">
          <p><strong>Single node.</strong> This server runs every shard itself; it has no cluster peers.</p>
          <div class="stats">
            <Stat label="Shards" value={String(data.health.shards)} />
            <Stat label="Shards led here" value={String(data.health.shards_led)} tone={data.health.shards_led === data.health.shards ? 'good' : 'warn'} />
            <Stat label="Health" value={data.health.status} tone={data.health.status === 'ok' ? 'good' : 'bad'} />
          </div>
        </div>
      )}
      {st && (
        <>
          <div class="stats">
            <Stat label="Nodes" value={`${st.nodes.filter((n) => n.status === 'up').length}/${st.nodes.length} up`} tone={st.nodes.every((n) => n.status === 'up') ? 'good' : 'bad'} />
            <Stat label="Shards" value={String(st.shards.length)} />
            <Stat label="This node" value={String(st.node_id)} />
            {st.mirror && <Stat label="Search mirror lag" value={`${fmtInt(st.mirror.lag_entries)} entries`} tone={st.mirror.lag_entries > 1000 ? 'warn' : ''} />}
          </div>
          <h2>Nodes</h2>
          <div class="table-wrap">
            <table class="grid">
              <thead><tr><th scope="col">Node</th><th scope="col">HTTP</th><th scope="col" class="hide-sm">Raft</th><th scope="col">Leads shards</th><th scope="col">Status</th></tr></thead>
              <tbody>
                {st.nodes.map((n) => (
                  <tr key={String(n.node_id)}>
                    <th scope="row">{String(n.node_id)}{String(n.node_id) === String(st.node_id) ? ' (this node)' : ''}</th>
                    <td class="mono small">{n.http_address}</td>
                    <td class="mono small hide-sm">{n.raft_address}</td>
                    <td>{n.leader_of.length ? n.leader_of.join(', ') : '—'}</td>
                    <td><span class={`badge ${n.status === 'up' ? 's-completed' : 's-dead'}`}>{n.status}</span></td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
          <h2>Shards</h2>
          <div class="table-wrap">
            <table class="grid">
              <thead><tr><th scope="col">Shard</th><th scope="col">Leader</th><th scope="col">Replicas (applied · lag)</th><th scope="col" class="hide-sm">Proposal p50 / p90 / p99</th></tr></thead>
              <tbody>
                {st.shards.map((s) => (
                  <tr key={s.shard_id}>
                    <th scope="row">{s.shard_id}</th>
                    <td>{String(s.leader_node)}</td>
                    <td>{s.replicas.map((r) => <span key={String(r.node_id)} class={`tag ${r.lag > 100 ? 'warn' : ''}`}>{String(r.node_id)} {r.role === 'leader' ? '★' : ''} {fmtInt(r.applied_index)} · {fmtInt(r.lag)}</span>)}</td>
                    <td class="hide-sm">{s.proposal_latency_ms ? `${s.proposal_latency_ms.p50} / ${s.proposal_latency_ms.p90} / ${s.proposal_latency_ms.p99} ms` : '—'}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        </>
      )}
    </section>
  )
}
