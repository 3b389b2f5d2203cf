import type { JobScore } from '../api'
import { fmtClock, fmtTime } from '../format'
import { dimensionMeans, fmtScore, scoreRows } from '../scores'

// ScoresPanel is the job's quality scores (POST /api/v1/jobs/{id}/score):
// every dimension of every score with its scorer and time, oldest first,
// and each dimension's mean when the job was scored more than once.
export function ScoresPanel({ scores }: { scores: JobScore[] }) {
  const rows = scoreRows(scores)
  const means = scores.length > 1 ? dimensionMeans(scores) : []
  return (
    <div class="block" data-testid="scores">
      <h2>Scores</h2>
      {means.length > 0 && (
        <div class="stats cost-stats" aria-label="Means">
          {means.map((m) => (
            <div class="stat" key={m.dimension}>
              <span class="stat-label">{m.dimension}</span>
              <span class="stat-value">{fmtScore(m.mean)}</span>
              <span class="stat-hint">mean of {m.count}</span>
            </div>
          ))}
        </div>
      )}
      <div class="table-wrap">
        <table class="grid scores-table">
          <thead>
            <tr><th scope="col">Dimension</th><th scope="col" class="num">Value</th><th scope="col">Scorer</th><th scope="col" class="hide-xs">At</th></tr>
          </thead>
          <tbody>
            {rows.map((r, i) => (
              <tr key={i} data-dimension={r.dimension} class={r.first && i > 0 ? 'score-start' : ''}>
                <th scope="row">{r.dimension}</th>
                <td class="num" data-testid="score-value">{fmtScore(r.value)}</td>
                <td>{r.first ? <>{r.score.scorer}{r.score.comment && <div class="muted small">{r.score.comment}</div>}</> : ''}</td>
                <td class="hide-xs">{r.first && <time dateTime={r.score.at} title={fmtTime(r.score.at)}>{fmtClock(r.score.at)}</time>}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </div>
  )
}
