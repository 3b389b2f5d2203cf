import { api } from '../api'
import { useLive } from '../live'
import { href } from '../router'
import { fmtAgo, fmtTime, shortId } from '../format'
import { workerStatus, HEARD_MS } from '../workers'
import { Empty, ErrorNote } from '../components/ui'

const STATUS_TEXT = {
  connected: 'connected',
  busy: 'connected: quiet, holding jobs under their lease',
  gone: `not heard from for ${HEARD_MS / 1000} s and holding no job`,
}

export function WorkersPage() {
  const { data, error } = useLive((s) => api.workers(s), 'workers', { minGapMs: 2000, pollLiveMs: 10_000, pollOfflineMs: 3000 })
  const now = Date.now()
  const list = [...(data ?? [])].sort((a, b) => b.last_seen.localeCompare(a.last_seen))
  const connected = list.filter((w) => workerStatus(w, now) !== 'gone').length
  return (
    <section aria-labelledby="h-workers">
      <div class="page-head"><h1 id="h-workers">Workers</h1>{data && <span class="muted" data-testid="workers-connected">{connected} connected · {list.length} seen in 24 h</span>}</div>
      <p class="muted intro small">A worker is connected while it was heard from (a fetch or a heartbeat) in the last minute, or while it holds active jobs: a long lease is not a lost worker.</p>
      <ErrorNote error={error} />
      {data && (list.length ? (
        <div class="table-wrap">
          <table class="grid">
            <thead><tr><th scope="col">Worker</th><th scope="col" class="hide-sm">Host</th><th scope="col">Queues</th><th scope="col" class="num">Jobs</th><th scope="col" class="hide-sm">First seen</th><th scope="col">Last seen</th></tr></thead>
            <tbody>
              {list.map((w) => {
                const st = workerStatus(w, now)
                return (
                  <tr key={w.id} data-worker={w.id} data-status={st}>
                    <th scope="row"><span role="img" class={`dot-status ${st === 'gone' ? 'down' : st === 'busy' ? 'busy' : 'up'}`} aria-label={STATUS_TEXT[st]} title={STATUS_TEXT[st]} /> {w.id}</th>
                    <td class="hide-sm">{w.hostname || '—'}</td>
                    <td>{w.queues.map((q) => <a key={q} class="tag" href={href(`/queues/${encodeURIComponent(q)}`)}>{q}</a>)}</td>
                    <td class="num">
                      {w.active_jobs}
                      {w.jobs.length > 0 && <details class="inline-details"><summary><span class="sr-only">jobs of {w.id}</span></summary>{w.jobs.map((j) => <div key={j}><a class="mono small" href={href(`/jobs/${encodeURIComponent(j)}`)}>{shortId(j)}</a></div>)}</details>}
                    </td>
                    <td class="hide-sm" title={fmtTime(w.first_seen)}>{fmtAgo(w.first_seen)}</td>
                    <td title={fmtTime(w.last_seen)}>{fmtAgo(w.last_seen)}{st === 'busy' && <span class="muted small"> · busy</span>}</td>
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
