import { api } from '../api'
import { useLive } from '../live'
import { href } from '../router'
import { fmtAgo, fmtDuration, shortId } from '../format'
import { Empty, ErrorNote } from '../components/ui'

export function WorkersPage() {
  const { data, error } = useLive((s) => api.workers(s), 'workers', { minGapMs: 2000, pollLiveMs: 10_000, pollOfflineMs: 3000 })
  const now = Date.now()
  const list = [...(data ?? [])].sort((a, b) => b.last_seen.localeCompare(a.last_seen))
  const connected = list.filter((w) => now - Date.parse(w.last_seen) < 60_000).length
  return (
    <section aria-labelledby="h-workers">
      <div class="page-head"><h1 id="h-workers">Workers</h1>{data && <span class="muted">{connected} connected · {list.length} seen in 24 h</span>}</div>
      <ErrorNote error={error} />
      {data && (list.length ? (
        <div class="table-wrap">
          <table class="grid">
            <thead><tr><th scope="col">Worker</th><th scope="col" class="hide-sm">Host</th><th scope="col">Queues</th><th scope="col" class="num">Jobs</th><th scope="col" class="hide-sm">Seen for</th><th scope="col">Last seen</th></tr></thead>
            <tbody>
              {list.map((w) => {
                const up = now - Date.parse(w.last_seen) < 60_000
                return (
                  <tr key={w.id}>
                    <th scope="row"><span role="img" class={`dot-status ${up ? "up" : "down"}`} aria-label={up ? 'connected' : 'not seen for a minute'} /> {w.id}</th>
                    <td class="hide-sm">{w.hostname || '—'}</td>
                    <td>{w.queues.map((q) => <a key={q} class="tag" href={href(`/queues/${encodeURIComponent(q)}`)}>{q}</a>)}</td>
                    <td class="num">
                      {w.active_jobs}
                      {w.jobs.length > 0 && <details class="inline-details"><summary><span class="sr-only">jobs of {w.id}</span></summary>{w.jobs.map((j) => <div key={j}><a class="mono small" href={href(`/jobs/${encodeURIComponent(j)}`)}>{shortId(j)}</a></div>)}</details>}
                    </td>
                    <td class="hide-sm">{fmtDuration(Date.parse(w.last_seen) - Date.parse(w.first_seen))}</td>
                    <td>{fmtAgo(w.last_seen)}</td>
                  </tr>
                )
              })}
            </tbody>
          </table>
        </div>
      ) : <Empty>No worker has fetched or heartbeated in the last 24 hours.</Empty>)}
    </section>
  )
}
