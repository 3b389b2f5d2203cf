// @vitest-environment jsdom
// The cost page's arithmetic and panels (budgets and providers among
// them), and the job page's usage panel.
import { afterEach, describe, expect, it, vi } from 'vitest'
import { cleanup, fireEvent, render, screen, waitFor, within } from '@testing-library/preact'
import { budgetUse, costPerJob, fmtPercent, fmtUSD, limitUse, modelsOf, scopeText, shares, spendSeries, usageByAttempt } from './cost'
import { Budgets, CostPage, CostPanels, Providers, type CostData } from './pages/Cost'
import { UsagePanel } from './components/UsagePanel'
import type { Budget, JobUsage, Provider, UsageGroup, UsageReport, UsageSummary } from './api'

afterEach(() => { cleanup(); vi.unstubAllGlobals() })

const group = (key: string | null, cost: number, jobs = 1, over: Partial<UsageGroup> = {}): UsageGroup => ({
  key, cost_usd: cost, jobs, reports: jobs, input_tokens: 100, output_tokens: 10, cache_creation_tokens: 0, cache_read_tokens: 0,
  cost_per_job_usd: jobs ? cost / jobs : 0, ...over,
})
const summary = (groups: UsageGroup[], over: Partial<UsageSummary> = {}): UsageSummary => {
  const cost = groups.reduce((t, g) => t + g.cost_usd, 0)
  const jobs = groups.reduce((t, g) => t + g.jobs, 0)
  return {
    period: '24h', group_by: 'queue', groups,
    totals: { cost_usd: cost, jobs, reports: jobs, input_tokens: 100 * groups.length, output_tokens: 10 * groups.length, cache_creation_tokens: 0, cache_read_tokens: 0, cost_per_job_usd: jobs ? cost / jobs : 0 },
    cache: { hits: 1, misses: 3, hit_rate: 0.25, estimated_savings_usd: 0.5 },
    ...over,
  }
}
const report = (attempt: number, phase: UsageReport['phase'], cost: number, model: string | null = 'm1', provider: string | null = 'p1'): UsageReport => ({
  attempt, phase, cost_usd: cost, input_tokens: 10, output_tokens: 2, cache_creation_tokens: 0, cache_read_tokens: 0, model, provider, latency_ms: 900, at: '2026-02-11T10:00:00Z',
})

describe('money', () => {
  it('shows small costs to a hundredth of a cent and large ones whole', () => {
    expect(fmtUSD(0)).toBe('$0')
    expect(fmtUSD(0.00004)).toBe('<$0.0001')
    expect(fmtUSD(0.0351)).toBe('$0.0351')
    expect(fmtUSD(0.25)).toBe('$0.25')
    expect(fmtUSD(0.5)).toBe('$0.50')
    expect(fmtUSD(0.125)).toBe('$0.125')
    expect(fmtUSD(0.4375)).toBe('$0.4375')
    expect(fmtUSD(47.234)).toBe('$47.23')
    expect(fmtUSD(1204.5)).toBe('$1,204.50')
    expect(fmtUSD(12345.6)).toBe('$12,346')
    expect(fmtUSD(null)).toBe('—')
    expect(fmtPercent(0.2427)).toBe('24.3%')
    expect(fmtPercent(0.25)).toBe('25%')
    expect(fmtPercent(0)).toBe('0%')
    expect(fmtPercent(1)).toBe('100%')
  })

  it('works out the cost per job when the server does not give it', () => {
    expect(costPerJob({ cost_usd: 3, jobs: 4 })).toBe(0.75)
    expect(costPerJob({ cost_usd: 3, jobs: 0 })).toBe(0)
    expect(costPerJob({ cost_usd: 3, jobs: 4, cost_per_job_usd: 0.7 })).toBe(0.7)
  })
})

describe('spend over time', () => {
  const now = Date.parse('2026-02-11T10:30:00Z') / 1000
  it('fills the hours the server left out with 0, oldest first, up to the hour of now', () => {
    const s = summary([group('2026-02-10T12:00:00Z', 1), group('2026-02-11T10:00:00Z', 2.5), group('2026-02-11T08:00:00Z', 0.5)], { group_by: 'hour' })
    const [ts, cost] = spendSeries(s, '24h', now)
    expect(ts.length).toBe(25) // 10:00 yesterday … 10:00 today
    expect(ts[0]).toBe(Date.parse('2026-02-10T10:00:00Z') / 1000)
    expect(ts[24]).toBe(Date.parse('2026-02-11T10:00:00Z') / 1000)
    expect(ts.every((t, i) => i === 0 || t - ts[i - 1] === 3600)).toBe(true)
    expect(cost[2]).toBe(1)
    expect(cost[22]).toBe(0.5)
    expect(cost[24]).toBe(2.5)
    expect(cost.reduce((a, b) => a + b, 0)).toBe(4)
  })

  it('uses days over 30 days', () => {
    const [ts, cost] = spendSeries(summary([group('2026-02-01T00:00:00Z', 7)], { group_by: 'day' }), '30d', now)
    expect(ts.length).toBe(31)
    expect(ts[30] - ts[29]).toBe(86400)
    expect(cost[ts.indexOf(Date.parse('2026-02-01T00:00:00Z') / 1000)]).toBe(7)
  })
})

describe('shares', () => {
  it('sizes each bar against the largest group', () => {
    const r = shares([group('a', 4), group('b', 1), group(null, 0)])
    expect(r.map((x) => x.share)).toEqual([1, 0.25, 0])
    expect(shares([group('a', 0)])[0].share).toBe(0)
  })
})

describe('a job\'s usage', () => {
  const u: JobUsage = {
    input_tokens: 40, output_tokens: 8, cache_creation_tokens: 0, cache_read_tokens: 5, cost_usd: 0.3,
    reports: [report(1, 'heartbeat', 0.1), report(1, 'fail', 0.0000001, 'm2', null), report(2, 'heartbeat', 0.1999999), report(2, 'ack', 0, null, null)],
  }
  it('groups the reports by attempt with exact subtotals', () => {
    const a = usageByAttempt(u)
    expect(a.map((x) => x.attempt)).toEqual([1, 2])
    expect(a[0].cost_usd).toBe(0.1000001)
    expect(a[1].cost_usd).toBe(0.1999999)
    expect(a[0].models).toEqual(['m1', 'm2'])
    expect(a[1].input_tokens).toBe(20)
    expect(modelsOf(u)).toBe('m1 (p1), m2')
  })

  it('is a panel with the totals and a row per report', () => {
    render(<UsagePanel usage={u} />)
    const panel = screen.getByTestId('usage')
    expect(within(panel).getByTestId('usage-cost').textContent).toBe('$0.30')
    expect(panel.querySelectorAll('tbody tr[data-phase]').length).toBe(4)
    expect(panel.querySelectorAll('tbody tr.subtotal').length).toBe(2)
    expect(panel.textContent).toContain('Models: m1 (p1), m2')
  })
})

describe('the cost page', () => {
  const data: CostData = {
    period: '24h', tagKey: '',
    totals: summary([group('llm.summarize', 3, 2), group('llm.classify', 1, 4)]),
    byModel: summary([group('claude-sonnet-4-5', 3.5, 5), group(null, 0.5, 1)], { group_by: 'model' }),
    byProvider: summary([group('anthropic', 4, 6)], { group_by: 'provider' }),
    overTime: summary([group(new Date(Math.floor(Date.now() / 3600_000) * 3600_000).toISOString().replace('.000Z', 'Z'), 4, 6)], { group_by: 'hour' }),
    byTag: null,
    budgets: [],
    providers: [],
  }

  it('shows the totals, the cache and a table per grouping', () => {
    render(<CostPanels data={data} period="24h" tagKey="" onTag={() => {}} />)
    expect(screen.getByTestId('cost-spend').textContent).toBe('$4.00')
    expect(screen.getByTestId('cost-jobs').textContent).toBe('6')
    expect(screen.getByTestId('cost-per-job').textContent).toBe('$0.6667')
    expect(screen.getByTestId('cost-hit-rate').textContent).toBe('25%')
    expect(screen.getByTestId('cost-savings').textContent).toBe('$0.50')
    const byQueue = screen.getByTestId('cost-by-queue')
    const rows = byQueue.querySelectorAll('tbody tr')
    expect([...rows].map((r) => r.getAttribute('data-key'))).toEqual(['llm.summarize', 'llm.classify'])
    expect(rows[0].querySelector('a')!.getAttribute('href')).toBe('/ui/queues/llm.summarize')
    expect((rows[1].querySelector('.share-fill') as HTMLElement).style.width).toBe('33.3%')
    const byModel = screen.getByTestId('cost-by-model')
    expect(byModel.querySelector('tbody tr a')!.getAttribute('href')).toBe('/ui/jobs?model=claude-sonnet-4-5')
    expect(byModel.textContent).toContain('(none)')
  })

  it('says how to report usage when there is none', () => {
    const none = summary([], { cache: { hits: 0, misses: 0, hit_rate: 0, estimated_savings_usd: 0 } })
    render(<CostPanels data={{ ...data, totals: none }} period="7d" tagKey="" onTag={() => {}} />)
    expect(screen.getByText(/No usage reported in the last 7 days/)).toBeTruthy()
  })

  it('asks the summary by queue, model, provider, hour and the tag, and splits by a tag key entered', async () => {
    const asked: string[] = []
    vi.stubGlobal('fetch', vi.fn(async (u: string) => {
      asked.push(u)
      if (u.endsWith('/budgets')) return new Response(JSON.stringify({ budgets: [] }), { status: 200, headers: { 'Content-Type': 'application/json' } })
      if (u.endsWith('/providers')) return new Response(JSON.stringify({ error: 'no route', code: 'not_found' }), { status: 404, headers: { 'Content-Type': 'application/json' } })
      const by = new URL(u, 'http://x').searchParams.get('group_by') ?? ''
      const body = by.startsWith('tag:') ? summary([group('acme', 2)], { group_by: by }) : summary([group('k', 1)], { group_by: by })
      return new Response(JSON.stringify(body), { status: 200, headers: { 'Content-Type': 'application/json' } })
    }))
    const { unmount } = render(<CostPage query={new URLSearchParams('period=7d&tag=tenant')} />)
    await waitFor(() => expect(screen.getByTestId('cost-by-tag').textContent).toContain('acme'))
    expect(screen.queryByTestId('providers')).toBeNull() // a server without providers
    expect(asked.map((u) => new URL(u, 'http://x').search).sort()).toEqual([
      '', '', // the budgets and the providers
      '?period=7d&group_by=hour', '?period=7d&group_by=model', '?period=7d&group_by=provider', '?period=7d&group_by=queue', '?period=7d&group_by=tag%3Atenant',
    ])
    expect(screen.getByRole('heading', { name: 'By tag tenant' })).toBeTruthy()
    unmount()

    const tags: string[] = []
    render(<CostPanels data={data} period="24h" tagKey="" onTag={(k) => tags.push(k)} />)
    fireEvent.input(screen.getByLabelText('Tag key'), { target: { value: ' customer ' } })
    fireEvent.submit(screen.getByRole('form', { name: 'Spend by tag' }))
    expect(tags).toEqual(['customer'])
  })
})

const budget = (over: Partial<Budget>): Budget => ({
  scope: 'queue:llm.summarize', daily_usd: 50, per_job_usd: null, on_exceed: 'hold', day: '2026-02-11', spent_usd: 0, exceeded: false, ...over,
})

describe('budgets', () => {
  it('says what a scope covers', () => {
    expect(scopeText('queue:llm.summarize')).toEqual({ kind: 'queue', label: 'llm.summarize', queue: 'llm.summarize' })
    expect(scopeText('tag:tenant=acme')).toEqual({ kind: 'tag', label: 'tenant=acme' })
    expect(scopeText('global')).toEqual({ kind: 'global', label: 'every job' })
    expect(scopeText('weird')).toEqual({ kind: 'other', label: 'weird' })
  })

  it('fills the bar with the day spent so far, amber from 80 %, red once spent', () => {
    expect(budgetUse(budget({ spent_usd: 12.5 }))).toEqual({ share: 0.25, level: 'ok', text: '$12.50 of $50.00 (25%)' })
    expect(budgetUse(budget({ spent_usd: 40 }))).toMatchObject({ share: 0.8, level: 'near' })
    expect(budgetUse(budget({ spent_usd: 39.99 })).level).toBe('ok')
    // Past the limit: a full bar, not a longer one.
    expect(budgetUse(budget({ spent_usd: 75, exceeded: true }))).toEqual({ share: 1, level: 'over', text: '$75.00 of $50.00 (150%)' })
    // The server's word wins over the page's arithmetic.
    expect(budgetUse(budget({ spent_usd: 49.9, exceeded: true })).level).toBe('over')
    // A limit of 0 is spent from the start.
    expect(budgetUse(budget({ daily_usd: 0, exceeded: true }))).toEqual({ share: 1, level: 'over', text: '$0 of $0' })
    // A per-job budget has no day to fill.
    expect(budgetUse(budget({ daily_usd: null, per_job_usd: 2.5, spent_usd: 0.125 }))).toEqual({ share: null, level: 'ok', text: '$0.125 today' })
  })

  it('is a panel with a row per budget, its bar, limits and action', () => {
    const budgets = [
      budget({ spent_usd: 45, on_exceed: 'reject' }),
      budget({ scope: 'tag:tenant=acme', daily_usd: 1, spent_usd: 1.5, exceeded: true, on_exceed: 'alert_only' }),
      budget({ scope: 'global', daily_usd: null, per_job_usd: 2.5, spent_usd: 0.25 }),
    ]
    render(<Budgets budgets={budgets} />)
    const panel = screen.getByTestId('budgets')
    expect(within(panel).getByRole('heading').textContent).toBe('Budget used today 2026-02-11 UTC')
    const rows = [...panel.querySelectorAll('tbody tr')]
    expect(rows.map((r) => r.getAttribute('data-scope'))).toEqual(['queue:llm.summarize', 'tag:tenant=acme', 'global'])
    expect(rows.map((r) => r.className)).toEqual(['budget-near', 'budget-over', 'budget-ok'])
    expect(rows[0].querySelector('a')!.getAttribute('href')).toBe('/ui/queues/llm.summarize')
    expect((rows[0].querySelector('.share-fill') as HTMLElement).style.width).toBe('90%')
    expect(rows[0].querySelector('[data-testid="budget-spent"]')!.textContent).toBe('$45.00 of $50.00 (90%)')
    expect(rows[0].querySelector('[data-testid="budget-action"]')!.textContent).toBe('reject new jobs')
    expect(rows[1].textContent).toContain('spent')
    expect(rows[1].querySelector('[data-testid="budget-action"]')!.textContent).toBe('alert only')
    expect(rows[2].querySelector('.share-fill')).toBeNull()
    expect(rows[2].textContent).toContain('$2.50')
    expect(rows[2].textContent).toContain('every job')
    // The phone's line for the columns it hides.
    expect(rows[0].querySelector('.budget-more')!.textContent).toBe('when spent: reject new jobs')
    expect(rows[2].querySelector('.budget-more')!.textContent).toBe('per job $2.50 · when spent: hold new jobs')
  })

  it('says how to set one when there is none, and stays away on a server without budgets', () => {
    const data = (budgets: Budget[] | null): CostData => {
      const s = summary([group('q', 1)])
      return { period: '24h', tagKey: '', totals: s, byModel: s, byProvider: s, overTime: s, byTag: null, budgets, providers: null }
    }
    const { unmount } = render(<CostPanels data={data([])} period="24h" tagKey="" onTag={() => {}} />)
    expect(screen.getByTestId('budgets').textContent).toContain('No budgets.')
    unmount()
    render(<CostPanels data={data(null)} period="24h" tagKey="" onTag={() => {}} />)
    expect(screen.queryByTestId('budgets')).toBeNull()
    cleanup()
    // No usage yet, but a budget: the budget still shows.
    const none = summary([], { cache: { hits: 0, misses: 0, hit_rate: 0, estimated_savings_usd: 0 } })
    render(<CostPanels data={{ ...data([budget({})]), totals: none }} period="24h" tagKey="" onTag={() => {}} />)
    expect(screen.getByText(/No usage reported/)).toBeTruthy()
    expect(screen.getByTestId('budgets').querySelectorAll('tbody tr').length).toBe(1)
  })
})

const provider = (over: Partial<Provider>): Provider => ({
  name: 'anthropic', rpm_limit: 600, input_tpm_limit: 100_000, output_tpm_limit: null, queues: ['llm.chat'],
  window: { requests: 0, input_tokens: 0, output_tokens: 0 }, shares: [], ...over,
})

describe('providers', () => {
  it("tells a limit's use in the last minute", () => {
    expect(limitUse(150, 600)).toEqual({ share: 0.25, level: 'ok', text: '150 of 600' })
    expect(limitUse(480, 600).level).toBe('near')
    expect(limitUse(479, 600).level).toBe('ok')
    expect(limitUse(612, 600)).toEqual({ share: 1, level: 'over', text: '612 of 600' })
    expect(limitUse(12_345, null)).toEqual({ share: null, level: 'ok', text: '12.3k (no limit)' })
    expect(limitUse(0, 50_000).text).toBe('0 of 50k')
    expect(limitUse(2_000_000, 4_500_000).text).toBe('2M of 4.50M')
  })

  it('is a panel with a row per provider: its limits, their use, its queues and shards', () => {
    const share = { rpm: 300, input_tpm: null, output_tpm: null, window: { requests: 0, input_tokens: 0, output_tokens: 0 } }
    render(<Providers providers={[
      provider({ window: { requests: 570, input_tokens: 20_000, output_tokens: 1_500 }, queues: ['llm.chat', 'llm.sum'], shares: [{ shard: 0, ...share }, { shard: 3, ...share }] }),
      provider({ name: 'openai', rpm_limit: null, input_tpm_limit: null, output_tpm_limit: 9000, queues: [] }),
    ]} />)
    const panel = screen.getByTestId('providers')
    expect(within(panel).getByRole('heading').textContent).toBe('Provider limits used in the last minute')
    const rows = [...panel.querySelectorAll('tbody tr')]
    expect(rows.map((r) => [r.getAttribute('data-provider'), r.className])).toEqual([['anthropic', 'budget-near'], ['openai', 'budget-ok']])
    const cell = (r: Element, id: string) => r.querySelector(`[data-testid="${id}"]`)!.textContent
    expect([cell(rows[0], 'provider-rpm'), cell(rows[0], 'provider-input'), cell(rows[0], 'provider-output')]).toEqual(['570 of 600', '20k of 100k', '1,500 (no limit)'])
    expect((rows[0].querySelector('.budget-bar.near .share-fill') as HTMLElement).style.width).toBe('95%')
    expect(rows[0].querySelectorAll('.budget-bar').length).toBe(2) // no bar without a limit
    expect(cell(rows[0], 'provider-queues')).toBe('llm.chat, llm.sum')
    expect(rows[0].querySelector('[data-testid="provider-queues"] a')!.getAttribute('href')).toBe('/ui/queues/llm.chat')
    expect(rows[0].querySelector('th')!.textContent).toBe('anthropicsplit over 2 shards')
    expect(rows[0].querySelector('.budget-more')!.textContent).toBe('input 20k of 100k · output 1,500 (no limit) · queues llm.chat, llm.sum')
    expect(cell(rows[1], 'provider-rpm')).toBe('0 (no limit)')
    expect(cell(rows[1], 'provider-queues')).toBe('none linked')
  })

  it('says how to add one when there is none, stays away on a server without providers, and shows before any usage', () => {
    const data = (providers: Provider[] | null): CostData => {
      const s = summary([group('q', 1)])
      return { period: '24h', tagKey: '', totals: s, byModel: s, byProvider: s, overTime: s, byTag: null, budgets: null, providers }
    }
    const { unmount } = render(<CostPanels data={data([])} period="24h" tagKey="" onTag={() => {}} />)
    expect(screen.getByTestId('providers').textContent).toContain('No providers.')
    expect(screen.getByTestId('providers').textContent).toContain('corvo providers set anthropic --rpm 4000')
    unmount()
    render(<CostPanels data={data(null)} period="24h" tagKey="" onTag={() => {}} />)
    expect(screen.queryByTestId('providers')).toBeNull()
    cleanup()
    const none = summary([], { cache: { hits: 0, misses: 0, hit_rate: 0, estimated_savings_usd: 0 } })
    render(<CostPanels data={{ ...data([provider({})]), totals: none }} period="24h" tagKey="" onTag={() => {}} />)
    expect(screen.getByText(/No usage reported/)).toBeTruthy()
    expect(screen.getByTestId('providers').querySelectorAll('tbody tr').length).toBe(1)
    cleanup()
    render(<CostPanels data={{ ...data([]), totals: none }} period="24h" tagKey="" onTag={() => {}} />)
    expect(screen.queryByTestId('providers')).toBeNull() // no usage and no providers: the hint above says enough
  })
})
