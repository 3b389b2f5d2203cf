import type { JobUsage } from '../api'
import { fmtClock, fmtDuration, fmtNum } from '../format'
import { fmtUSD, modelsOf, usageByAttempt } from '../cost'

// The job page's chunk for LLM work: this panel and the scores'.
export { ScoresPanel } from './ScoresPanel'

// UsagePanel is what the job's LLM calls used: its totals, the models and
// providers, and each report (per attempt: the latest heartbeat's running
// total, then the ack's or fail's own), with each attempt's subtotal.
export function UsagePanel({ usage }: { usage: JobUsage }) {
  const attempts = usageByAttempt(usage)
  const models = modelsOf(usage)
  return (
    <div class="block" data-testid="usage">
      <h2>Usage and cost</h2>
      <div class="stats cost-stats">
        <div class="stat"><span class="stat-label">Cost</span><span class="stat-value" data-testid="usage-cost">{fmtUSD(usage.cost_usd)}</span></div>
        <div class="stat"><span class="stat-label">Input tokens</span><span class="stat-value">{fmtNum(usage.input_tokens)}</span></div>
        <div class="stat"><span class="stat-label">Output tokens</span><span class="stat-value">{fmtNum(usage.output_tokens)}</span></div>
        <div class="stat"><span class="stat-label">Cache read</span><span class="stat-value">{fmtNum(usage.cache_read_tokens)}</span>{usage.cache_creation_tokens > 0 && <span class="stat-hint">{fmtNum(usage.cache_creation_tokens)} written</span>}</div>
      </div>
      {models && <p class="small"><span class="muted">Models:</span> {models}</p>}
      <div class="table-wrap">
        <table class="grid usage-table">
          <thead>
            <tr>
              <th scope="col">Attempt</th><th scope="col">Phase</th><th scope="col" class="hide-xs">Model</th><th scope="col" class="hide-sm">Provider</th>
              <th scope="col" class="num">Tokens in / out</th><th scope="col" class="num">Cost</th><th scope="col" class="num hide-sm">Latency</th><th scope="col" class="hide-sm">At</th>
            </tr>
          </thead>
          <tbody>
            {attempts.map((a) => [
              ...a.reports.map((r, i) => (
                <tr key={`${a.attempt}-${i}`} data-phase={r.phase}>
                  <td>{i === 0 ? a.attempt : ''}</td>
                  <td>{r.phase === 'heartbeat' ? 'heartbeats' : r.phase}</td>
                  <td class="hide-xs">{r.model ?? <span class="muted">—</span>}</td>
                  <td class="hide-sm">{r.provider ?? <span class="muted">—</span>}</td>
                  <td class="num">{fmtNum(r.input_tokens)} / {fmtNum(r.output_tokens)}</td>
                  <td class="num">{fmtUSD(r.cost_usd)}</td>
                  <td class="num hide-sm">{r.latency_ms ? fmtDuration(r.latency_ms) : '—'}</td>
                  <td class="hide-sm"><time dateTime={r.at} title={r.at}>{fmtClock(r.at)}</time></td>
                </tr>
              )),
              attempts.length > 1 && a.reports.length > 1 && (
                <tr key={`${a.attempt}-sum`} class="subtotal">
                  <td /><td class="muted">attempt {a.attempt}</td><td class="hide-xs" /><td class="hide-sm" />
                  <td class="num">{fmtNum(a.input_tokens)} / {fmtNum(a.output_tokens)}</td><td class="num">{fmtUSD(a.cost_usd)}</td><td class="hide-sm" /><td class="hide-sm" />
                </tr>
              ),
            ])}
          </tbody>
        </table>
      </div>
    </div>
  )
}
