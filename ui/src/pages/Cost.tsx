// The cost page: what the workers' LLM calls cost (usage reported on
// acks and heartbeats) over a period — totals, the result cache's
// savings, spend over time, the budgets' use today, the providers' limits
// and their use in the last minute, and spend by queue, model, provider
// and tag.
// Each part is a panel of its own (CostPanels): routing adds its own to
// the list.
import { useState } from 'preact/hooks'
import type { ComponentChildren } from 'preact'
import { api, ApiError, USAGE_PERIODS, type Budget, type Provider, type UsageGroup, type UsagePeriod, type UsageSummary } from '../api'
import { useLive } from '../live'
import { href, navigate } from '../router'
import { fmtNum } from '../format'
import { budgetUse, bucketOf, costPerJob, fmtPercent, fmtUSD, isPeriod, limitUse, ON_EXCEED_TEXT, scopeText, shares, spendSeries, type BudgetUse } from '../cost'
import { Chart, PALETTE } from '../components/charts'
import { Empty, ErrorNote, Stat } from '../components/ui'

export interface CostData {
  period: UsagePeriod
  tagKey: string
  totals: UsageSummary // by queue (its totals and cache are the page's)
  byModel: UsageSummary
  byProvider: UsageSummary
  overTime: UsageSummary
  byTag: UsageSummary | null
  budgets: Budget[] | null // null: a server without budgets
  providers: Provider[] | null // null: a server without providers
}

// orNull answers null for a 404: a server without that part.
const orNull = (e: unknown) => (e instanceof ApiError && e.status === 404 ? null : Promise.reject(e))

export async function loadCost(period: UsagePeriod, tagKey: string, s: AbortSignal): Promise<CostData> {
  const [totals, byModel, byProvider, overTime, byTag, budgets, providers] = await Promise.all([
    api.usageSummary(period, 'queue', s),
    api.usageSummary(period, 'model', s),
    api.usageSummary(period, 'provider', s),
    api.usageSummary(period, bucketOf(period), s),
    tagKey ? api.usageSummary(period, `tag:${tagKey}`, s) : Promise.resolve(null),
    api.budgets(s).catch(orNull),
    api.providers(s).catch(orNull),
  ])
  return { period, tagKey, totals, byModel, byProvider, overTime, byTag, budgets, providers }
}

const PERIOD_TEXT: Record<UsagePeriod, string> = { '24h': 'last 24 hours', '7d': 'last 7 days', '30d': 'last 30 days' }

function costQuery(period: UsagePeriod, tag: string) {
  const q = new URLSearchParams()
  if (period !== '24h') q.set('period', period)
  if (tag) q.set('tag', tag)
  return q.toString()
}

export function CostPage({ query }: { query: URLSearchParams }) {
  const p = query.get('period')
  const period: UsagePeriod = isPeriod(p) ? p : '24h'
  const tagKey = (query.get('tag') ?? '').trim()
  const { data, error } = useLive(
    (s) => loadCost(period, tagKey, s),
    `cost:${period}:${tagKey}`,
    // Usage arrives with acks, fails and heartbeats: reload after job
    // events, at most every 10 s (five summaries, the budgets and the
    // providers a reload).
    { minGapMs: 10_000, pollLiveMs: 30_000, pollOfflineMs: 15_000 },
  )
  const go = (per: UsagePeriod, tag: string) => {
    const q = costQuery(per, tag)
    navigate('/cost' + (q ? '?' + q : ''))
  }

  return (
    <section aria-labelledby="h-cost">
      <div class="page-head">
        <h1 id="h-cost">Cost</h1>
        <fieldset class="chips period" aria-label="Period">
          {USAGE_PERIODS.map((x) => (
            <label key={x} class={`chip ${x === period ? 'on' : ''}`}>
              <input type="radio" name="period" value={x} checked={x === period} onChange={() => go(x, tagKey)} />{x}
            </label>
          ))}
        </fieldset>
        <span class="muted">{PERIOD_TEXT[period]}</span>
      </div>
      <ErrorNote error={error} />
      <CostPanels data={data} period={period} tagKey={tagKey} onTag={(t) => go(period, t)} />
    </section>
  )
}

// CostPanels lays out the page's panels in order; a new panel is one more
// entry here, reading the same data or loading its own. The budgets and
// the providers show even before any usage is reported.
export function CostPanels({ data, period, tagKey, onTag }: { data: CostData | undefined; period: UsagePeriod; tagKey: string; onTag: (key: string) => void }) {
  if (data && data.totals.totals.reports === 0 && data.totals.cache.hits + data.totals.cache.misses === 0) {
    return (
      <>
        <Empty>
          No usage reported in the {PERIOD_TEXT[period]}. Workers report what their LLM calls used on an ack or a heartbeat
          (<span class="mono">"usage": {'{'}"input_tokens", "output_tokens", "model", "provider", "cost_usd"{'}'}</span>); it shows here within seconds.
        </Empty>
        {data.budgets && data.budgets.length > 0 && <Budgets budgets={data.budgets} />}
        {data.providers && data.providers.length > 0 && <Providers providers={data.providers} />}
      </>
    )
  }
  return (
    <>
      <Totals data={data} />
      <SpendOverTime data={data} period={period} />
      {data?.budgets !== null && <Budgets budgets={data?.budgets} />}
      {data?.providers !== null && <Providers providers={data?.providers} />}
      <div class="cost-groups">
        <Breakdown title="By queue" what="queue" summary={data?.totals} link={(k) => href(`/queues/${encodeURIComponent(k)}`)} />
        <Breakdown title="By model" what="model" summary={data?.byModel} link={(k) => href('/jobs', `model=${encodeURIComponent(k)}`)} />
        <Breakdown title="By provider" what="provider" summary={data?.byProvider} />
        <TagBreakdown tagKey={tagKey} summary={data?.byTag} loaded={!!data} onTag={onTag} />
      </div>
    </>
  )
}

function Totals({ data }: { data: CostData | undefined }) {
  const t = data?.totals.totals
  const c = data?.totals.cache
  const v = (f: () => string) => (data ? f() : '…')
  return (
    <div class="stats cost-stats" aria-label="Totals">
      <Stat label="Spend" value={v(() => fmtUSD(t!.cost_usd))} testid="cost-spend" tone="info" />
      <Stat label="Jobs" value={v(() => fmtNum(t!.jobs))} hint={t ? `${fmtNum(t.reports)} reports` : undefined} testid="cost-jobs" />
      <Stat label="Cost per job" value={v(() => fmtUSD(costPerJob(t!)))} testid="cost-per-job" />
      <Stat label="Input tokens" value={v(() => fmtNum(t!.input_tokens))} hint={t && t.cache_read_tokens ? `${fmtNum(t.cache_read_tokens)} read from cache` : undefined} testid="cost-input" />
      <Stat label="Output tokens" value={v(() => fmtNum(t!.output_tokens))} testid="cost-output" />
      <Stat label="Cache hit rate" value={v(() => fmtPercent(c!.hit_rate))} hint={c ? `${fmtNum(c.hits)} ${c.hits === 1 ? 'hit' : 'hits'}, ${fmtNum(c.misses)} ${c.misses === 1 ? 'miss' : 'misses'}` : undefined} testid="cost-hit-rate" />
      <Stat label="Saved by the cache" value={v(() => fmtUSD(c!.estimated_savings_usd))} hint="estimated" testid="cost-savings" tone={c && c.estimated_savings_usd > 0 ? 'good' : ''} />
    </div>
  )
}

function SpendOverTime({ data, period }: { data: CostData | undefined; period: UsagePeriod }) {
  const [ts, cost] = data ? spendSeries(data.overTime, period, Date.now() / 1000) : [[], []]
  const per = bucketOf(period)
  const peak = cost.reduce((m, x) => Math.max(m, x), 0)
  return (
    <div class="charts">
      <Chart
        title={`Spend per ${per} (USD)`}
        summary={data ? `${fmtUSD(data.totals.totals.cost_usd)} in the period, at most ${fmtUSD(peak)} in an ${per === 'hour' ? 'hour' : 'day'}` : 'loading'}
        unit={(x) => fmtUSD(x)}
        series={[{ label: 'spend', color: PALETTE[0], fill: true }]}
        data={[ts, cost]}
      />
    </div>
  )
}

// Budgets is each budget's use of the current UTC day: what its scope
// spent against its daily limit (a bar, amber from 80 %, red once spent),
// its per-job limit, and what happens to new jobs once it is spent.
export function Budgets({ budgets }: { budgets: Budget[] | undefined }) {
  return (
    <div class="panel cost-budgets" data-testid="budgets">
      <h2>Budget used today{budgets && budgets.length > 0 && <span class="muted small"> {budgets[0].day} UTC</span>}</h2>
      {budgets && (budgets.length === 0 ? (
        <p class="muted">
          No budgets. A budget limits what a queue, a tag value or the whole namespace may spend a day or a job:
          {' '}<span class="mono">corvo budgets set queue:&lt;name&gt; --daily-usd 50</span>.
        </p>
      ) : (
        <div class="table-wrap">
          <table class="grid cost-table budgets-table">
            <thead>
              <tr>
                <th scope="col">Scope</th>
                <th scope="col">Spent today</th>
                <th scope="col" class="num hide-xs">Per job</th>
                <th scope="col" class="hide-xs">When spent</th>
              </tr>
            </thead>
            <tbody>
              {budgets.map((b) => {
                const sc = scopeText(b.scope)
                const use = budgetUse(b)
                const action = ON_EXCEED_TEXT[b.on_exceed] ?? b.on_exceed
                return (
                  <tr key={b.scope} data-scope={b.scope} class={`budget-${use.level}`}>
                    <th scope="row" class="key-cell">
                      {sc.kind !== 'other' && <span class="muted small">{sc.kind} </span>}
                      {sc.queue ? <a href={href(`/queues/${encodeURIComponent(sc.queue)}`)}>{sc.label}</a> : sc.label}
                    </th>
                    <td class="budget-use">
                      <span class="nowrap" data-testid="budget-spent">{use.text}</span>
                      {use.level === 'over' && <span class="badge s-dead">spent</span>}
                      {use.share !== null && <div class={`share budget-bar ${use.level}`} aria-hidden="true"><div class="share-fill" style={{ width: `${(use.share * 100).toFixed(1)}%` }} /></div>}
                      <div class="budget-more muted small">{b.per_job_usd !== null && `per job ${fmtUSD(b.per_job_usd)} · `}when spent: {action}</div>
                    </td>
                    <td class="num nowrap hide-xs">{b.per_job_usd === null ? <span class="muted">—</span> : fmtUSD(b.per_job_usd)}</td>
                    <td class="hide-xs" data-testid="budget-action">{action}</td>
                  </tr>
                )
              })}
            </tbody>
          </table>
        </div>
      ))}
    </div>
  )
}

// UseCell is one limit's use: the words and, under a limit, the bar.
function UseCell({ use, testid }: { use: BudgetUse; testid: string }) {
  return (
    <>
      <span class="nowrap" data-testid={testid}>{use.text}</span>
      {use.share !== null && <div class={`share budget-bar ${use.level}`} aria-hidden="true"><div class="share-fill" style={{ width: `${(use.share * 100).toFixed(1)}%` }} /></div>}
    </>
  )
}

const LEVELS = ['ok', 'near', 'over'] as const

// Providers is each provider's limits per minute and what the last
// minute used of them (requests handed out, tokens reported, summed over
// the shards), the queues that share them, and over how many shards the
// pool is split.
export function Providers({ providers }: { providers: Provider[] | undefined }) {
  return (
    <div class="panel cost-budgets cost-providers" data-testid="providers">
      <h2>Provider limits{providers && providers.length > 0 && <span class="muted small"> used in the last minute</span>}</h2>
      {providers && (providers.length === 0 ? (
        <p class="muted">
          No providers. A provider's requests and tokens per minute are shared by the queues linked to it:
          {' '}<span class="mono">corvo providers set anthropic --rpm 4000</span>, then <span class="mono">corvo providers link &lt;queue&gt; anthropic</span>.
        </p>
      ) : (
        <div class="table-wrap">
          <table class="grid cost-table budgets-table providers-table">
            <thead>
              <tr>
                <th scope="col">Provider</th>
                <th scope="col">Requests / min</th>
                <th scope="col" class="hide-xs">Input tokens / min</th>
                <th scope="col" class="hide-xs">Output tokens / min</th>
                <th scope="col" class="hide-xs">Queues</th>
              </tr>
            </thead>
            <tbody>
              {providers.map((p) => {
                const rpm = limitUse(p.window.requests, p.rpm_limit)
                const input = limitUse(p.window.input_tokens, p.input_tpm_limit)
                const output = limitUse(p.window.output_tokens, p.output_tpm_limit)
                const level = LEVELS[Math.max(...[rpm, input, output].map((u) => LEVELS.indexOf(u.level)))]
                const queues = () => p.queues.length === 0 ? <span class="muted">none linked</span> : p.queues.map((q, i) => (
                  <span key={q}>{i > 0 && ', '}<a href={href(`/queues/${encodeURIComponent(q)}`)}>{q}</a></span>
                ))
                return (
                  <tr key={p.name} data-provider={p.name} class={`budget-${level}`}>
                    <th scope="row" class="key-cell">
                      {p.name}
                      {p.shares.length > 1 && <div class="muted small">split over {p.shares.length} shards</div>}
                    </th>
                    <td class="budget-use">
                      <UseCell use={rpm} testid="provider-rpm" />
                      <div class="budget-more muted small">input {input.text} · output {output.text} · queues {queues()}</div>
                    </td>
                    <td class="budget-use hide-xs"><UseCell use={input} testid="provider-input" /></td>
                    <td class="budget-use hide-xs"><UseCell use={output} testid="provider-output" /></td>
                    <td class="hide-xs" data-testid="provider-queues">{queues()}</td>
                  </tr>
                )
              })}
            </tbody>
          </table>
        </div>
      ))}
    </div>
  )
}

// Breakdown is one grouping of the summary as a table: each group's
// spend with a bar (relative to the largest), jobs, tokens and cost per
// job.
export function Breakdown({ title, what, summary, link, children }: {
  title: string; what: string; summary: UsageSummary | null | undefined
  link?: (key: string) => string; children?: ComponentChildren
}) {
  const total = summary?.totals.cost_usd ?? 0
  return (
    <div class="panel cost-group" data-testid={`cost-by-${what}`}>
      <h2>{title}</h2>
      {children}
      {summary && (summary.groups.length === 0 ? <p class="muted">No usage in the period.</p> : (
        <div class="table-wrap">
          <table class="grid cost-table">
            <thead>
              <tr>
                <th scope="col">{what[0].toUpperCase() + what.slice(1)}</th>
                <th scope="col" class="num">Spend</th>
                <th scope="col" class="num">Jobs</th>
                <th scope="col" class="num hide-sm">Tokens in / out</th>
                <th scope="col" class="num hide-xs">Per job</th>
              </tr>
            </thead>
            <tbody>
              {shares(summary.groups).map(({ key, group, share }) => (
                <tr key={key ?? '\u0000none'} data-key={key ?? ''}>
                  <th scope="row" class="key-cell">
                    {key === null ? <span class="muted">(none)</span> : link ? <a href={link(key)}>{key}</a> : key}
                    <div class="share" aria-hidden="true"><div class="share-fill" style={{ width: `${Math.max(share * 100, group.cost_usd > 0 ? 1 : 0).toFixed(1)}%` }} /></div>
                  </th>
                  <td class="num nowrap" title={total > 0 ? `${fmtPercent(group.cost_usd / total)} of the spend` : undefined}>{fmtUSD(group.cost_usd)}</td>
                  <td class="num">{fmtNum(group.jobs)}</td>
                  <td class="num hide-sm nowrap">{fmtNum(group.input_tokens)} / {fmtNum(group.output_tokens)}</td>
                  <td class="num hide-xs nowrap">{fmtUSD(costPerJob(group as UsageGroup))}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      ))}
    </div>
  )
}

function TagBreakdown({ tagKey, summary, loaded, onTag }: { tagKey: string; summary: UsageSummary | null | undefined; loaded: boolean; onTag: (key: string) => void }) {
  const [key, setKey] = useState(tagKey)
  const submit = (e: Event) => { e.preventDefault(); onTag(key.trim()) }
  return (
    <Breakdown title={tagKey ? `By tag ${tagKey}` : 'By tag'} what="tag" summary={summary}>
      <form class="tag-form" onSubmit={submit} aria-label="Spend by tag">
        <label>Tag key
          <input name="tag" value={key} placeholder="tenant" onInput={(e) => setKey((e.target as HTMLInputElement).value)} spellcheck={false} />
        </label>
        <button type="submit" class="btn small">Show</button>
      </form>
      {loaded && !tagKey && <p class="muted small">Enter a tag key (a job's tags, e.g. tenant or customer) to split the spend by its values.</p>}
    </Breakdown>
  )
}
