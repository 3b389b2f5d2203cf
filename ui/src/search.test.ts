import { describe, expect, it } from 'vitest'
import { activeFilters, describe as describeForm, emptyForm, filterFromForm, formFromQuery, parseCost, parseTags, queryFromForm, toRFC3339 } from './search'

describe('search in the URL', () => {
  it('round-trips every field through the query string', () => {
    const f = { ...emptyForm(), queue: 'emails.send', states: ['dead', 'retrying'] as const, priority: 'high' as const, tags: 'tenant=acme, region=eu',
      payload: 'user@example.com', jq: '.to | endswith("x") and .n > 1', error: 'SMTP', after: '2026-02-10T09:30', before: '2026-02-11', worker: 'w1', id: 'job_2_',
      batch: 'batch_1_01J', parent: 'job_0_01J', model: 'claude-sonnet-4-5', minCost: '0.05', sort: 'attempt', order: 'asc' as const }
    const q = queryFromForm({ ...f, states: [...f.states] })
    expect(q.getAll('tag')).toEqual(['tenant=acme', 'region=eu'])
    const back = formFromQuery(new URLSearchParams(q.toString()))
    expect(back).toEqual({ ...f, states: ['dead', 'retrying'] })
  })

  it('leaves defaults out and drops unknown values', () => {
    expect(queryFromForm(emptyForm()).toString()).toBe('')
    const f = formFromQuery(new URLSearchParams('state=dead,bogus&priority=urgent&sort=nope&order=sideways'))
    expect(f.states).toEqual(['dead'])
    expect(f.priority).toBe('')
    expect(f.sort).toBe('created_at')
    expect(f.order).toBe('desc')
  })

  it('keeps the queue out of the URL on a queue page', () => {
    expect(queryFromForm({ ...emptyForm(), queue: 'q', payload: 'x' }, false).toString()).toBe('payload=x')
  })
})

describe('filterFromForm', () => {
  it('builds the API search body', () => {
    const f = filterFromForm({ ...emptyForm(), queue: 'q', states: ['dead'], tags: 'a=1,=bad, b = 2 ,c', jq: '.a', error: 'boom', after: '2026-02-10T00:00:00Z' })
    expect(f).toEqual({ sort: 'created_at', order: 'desc', queue: 'q', state: ['dead'], tags: { a: '1', b: '2' }, payload_jq: '.a', error_contains: 'boom', created_after: '2026-02-10T00:00:00.000Z' })
  })
  it("asks for a batch's members and a job's children", () => {
    const f = filterFromForm(formFromQuery(new URLSearchParams('batch=batch_1_01J&depends_on=job_0_01J')))
    expect(f).toEqual({ sort: 'created_at', order: 'desc', batch_id: 'batch_1_01J', depends_on: 'job_0_01J' })
    expect(describeForm({ ...emptyForm(), batch: 'b', parent: 'j' })).toBe('batch b, waiting on j')
    const withBoth = { ...emptyForm(), batch: 'b', parent: 'j' }
    expect(activeFilters(withBoth)).toBe(2)
    expect(activeFilters(withBoth, { batch: true })).toBe(1) // the batch page's own batch is not a filter the user set
  })
  it('describes a filter in words', () => {
    expect(describeForm(emptyForm())).toBe('every job')
    expect(describeForm({ ...emptyForm(), queue: 'q', states: ['dead'], error: 'SMTP' })).toBe('queue q, state dead, error contains "SMTP"')
  })
})

describe('parseTags and toRFC3339', () => {
  it('parses tags leniently', () => {
    expect(parseTags('')).toEqual([])
    expect(parseTags('k=v=w')).toEqual([['k', 'v=w']])
  })
  it('turns local and zoned times into UTC RFC 3339, and rejects junk', () => {
    expect(toRFC3339('2026-02-10T10:00:00+02:00')).toBe('2026-02-10T08:00:00.000Z')
    const local = toRFC3339('2026-02-10T09:30')!
    expect(new Date(local).getTime()).toBe(new Date(2026, 1, 10, 9, 30).getTime())
    expect(new Date(toRFC3339('2026-02-10')!).getTime()).toBe(new Date(2026, 1, 10).getTime())
    expect(toRFC3339('yesterday')).toBeUndefined()
    expect(toRFC3339('')).toBeUndefined()
  })
})

describe('cost and model filters', () => {
  it('send model and min_cost_usd, and count as filters', () => {
    const f = { ...emptyForm(), model: 'gpt-4o', minCost: '$0.25' }
    expect(filterFromForm(f)).toMatchObject({ model: 'gpt-4o', min_cost_usd: 0.25 })
    expect(queryFromForm(f).toString()).toBe('model=gpt-4o&min_cost=%240.25')
    expect(describeForm(f)).toBe('model gpt-4o, cost at least $0.25')
    expect(activeFilters(f)).toBe(2)
  })

  it('leave out a cost bound that is not a non-negative number', () => {
    for (const bad of ['', ' ', 'abc', '-1', '1e3', '0.5.1', '$']) {
      expect(parseCost(bad), bad).toBeUndefined()
      expect(filterFromForm({ ...emptyForm(), minCost: bad }).min_cost_usd, bad).toBeUndefined()
    }
    expect(parseCost(' 3 ')).toBe(3)
    expect(parseCost('0')).toBe(0)
    expect(parseCost('.5')).toBe(0.5)
    expect(parseCost('2.')).toBe(2)
    expect(filterFromForm({ ...emptyForm(), minCost: '0' }).min_cost_usd).toBe(0)
  })
})
