import { api, ApiError } from '../api'
import { useLive } from '../live'
import { fmtAgo, fmtDuration, fmtInt } from '../format'
import { BulkProgress } from '../components/Bulk'
import { Empty, ErrorNote } from '../components/ui'

export function BulkPage() {
  const { data, error } = useLive((s) => api.bulkList(s).catch((e) => {
    if (e instanceof ApiError && e.status === 404) return null
    throw e
  }), 'bulk', { match: () => false, pollLiveMs: 3000, pollOfflineMs: 3000 })
  const list = [...(data ?? [])].sort((a, b) => b.created_at.localeCompare(a.created_at))
  return (
    <section aria-labelledby="h-bulk">
      <div class="page-head"><h1 id="h-bulk">Bulk operations</h1></div>
      <p class="muted intro">Large bulk operations run in the background; start them from a search (Jobs, Dead letters or a queue).</p>
      <ErrorNote error={error} />
      {data === null && <Empty>This server does not list bulk operations.</Empty>}
      {data && (list.length ? (
        <div class="table-wrap">
          <table class="grid">
            <thead><tr><th scope="col">Operation</th><th scope="col">Action</th><th scope="col">Status</th><th scope="col">Progress</th><th scope="col" class="num">Affected</th><th scope="col" class="num">Errors</th><th scope="col" class="hide-sm">Started</th><th scope="col" class="hide-sm">Took</th></tr></thead>
            <tbody>
              {list.map((o) => (
                <tr key={o.id}>
                  <th scope="row" class="mono small">{o.id}</th>
                  <td>{o.action}</td>
                  <td><span class={`badge s-${o.status === 'completed' ? 'completed' : o.status === 'processing' ? 'active' : 'dead'}`}>{o.status}</span></td>
                  <td class="progress-cell">{o.status === 'processing' ? <BulkProgress id={o.id} /> : `${fmtInt(o.processed)} / ${fmtInt(o.total)}`}</td>
                  <td class="num">{fmtInt(o.affected)}</td>
                  <td class="num">{fmtInt(o.errors)}</td>
                  <td class="hide-sm">{fmtAgo(o.created_at)}</td>
                  <td class="hide-sm">{o.finished_at ? fmtDuration(o.duration_ms) : '…'}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      ) : <Empty>No bulk operation has run on this node.</Empty>)}
    </section>
  )
}
