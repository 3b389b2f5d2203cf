// @vitest-environment jsdom
// The job page's scores panel and its formatting, and the routing line.
import { afterEach, describe, expect, it } from 'vitest'
import { cleanup, render, screen } from '@testing-library/preact'
import { dimensionMeans, fmtScore, scoreRows } from './scores'
import { routeNote } from './format'
import { ScoresPanel } from './components/ScoresPanel'
import type { JobRouting, JobScore } from './api'

afterEach(cleanup)

const ann: JobScore = { scorer: 'human:ann', dimensions: { relevance: 0.85, accuracy: 0.92 }, comment: 'cites the right clause', at: '2026-02-11T10:00:00Z' }
const judge: JobScore = { scorer: 'llm-judge', dimensions: { accuracy: 0.8 }, comment: null, at: '2026-02-11T10:05:00.250Z' }

describe('scores', () => {
  it('shows a value as posted, rounded for reading', () => {
    expect(fmtScore(0.92)).toBe('0.92')
    expect(fmtScore(0.123456)).toBe('0.1235')
    expect(fmtScore(-0.5)).toBe('-0.5')
    expect(fmtScore(0)).toBe('0')
    expect(fmtScore(4)).toBe('4')
    expect(fmtScore(1234.5678)).toBe('1,234.57')
    expect(fmtScore(2_500_000)).toBe('2,500,000')
    expect(fmtScore(Number.NaN)).toBe('—')
  })

  it('lists every dimension of every score, each score by name, oldest score first', () => {
    const rows = scoreRows([ann, judge])
    expect(rows.map((r) => [r.dimension, r.value, r.score.scorer, r.first])).toEqual([
      ['accuracy', 0.92, 'human:ann', true], ['relevance', 0.85, 'human:ann', false], ['accuracy', 0.8, 'llm-judge', true],
    ])
  })

  it('gives each dimension its mean over the scores that have it', () => {
    const m = dimensionMeans([ann, judge])
    expect(m.map((x) => x.dimension)).toEqual(['accuracy', 'relevance'])
    expect(m[0].mean).toBeCloseTo(0.86, 12)
    expect(m[0].count).toBe(2)
    expect(m[1]).toEqual({ dimension: 'relevance', mean: 0.85, count: 1 })
  })

  it('is a panel with a row per dimension, the scorer and time on a score\'s first row', () => {
    render(<ScoresPanel scores={[ann, judge]} />)
    const panel = screen.getByTestId('scores')
    const rows = [...panel.querySelectorAll('tbody tr')]
    expect(rows.map((r) => r.getAttribute('data-dimension'))).toEqual(['accuracy', 'relevance', 'accuracy'])
    expect(rows.map((r) => r.querySelector('[data-testid="score-value"]')!.textContent)).toEqual(['0.92', '0.85', '0.8'])
    expect(rows[0].textContent).toContain('human:ann')
    expect(rows[0].textContent).toContain('cites the right clause')
    expect(rows[0].querySelector('time')!.textContent).toBe('10:00:00.000')
    expect(rows[1].textContent).not.toContain('human:ann')
    expect(rows[2].querySelector('time')!.textContent).toBe('10:05:00.250')
    // Scored twice: the means above the table.
    expect(panel.querySelector('.stats')!.textContent).toContain('accuracy0.86mean of 2')
  })

  it('shows no means for a job scored once', () => {
    render(<ScoresPanel scores={[ann]} />)
    expect(screen.getByTestId('scores').querySelector('.stats')).toBeNull()
  })
})

describe('routing', () => {
  const r: JobRouting = { prefer: 'claude-sonnet-4-5', fallback: ['gpt-4o', 'llama-70b'], strategy: 'fallback_on_error', order: ['claude-sonnet-4-5', 'gpt-4o', 'llama-70b'], target: 'gpt-4o', index: 1, fallbacks: 1 }
  it('says where the current model stands in the try order', () => {
    expect(routeNote(r)).toBe('model 2 of 3 (fallback_on_error: claude-sonnet-4-5 → gpt-4o → llama-70b), 1 fallback after a provider error')
    expect(routeNote({ ...r, target: 'llama-70b', index: 2, fallbacks: 2 })).toBe('model 3 of 3 (fallback_on_error: claude-sonnet-4-5 → gpt-4o → llama-70b), 2 fallbacks after a provider error')
    expect(routeNote({ ...r, fallback: [], order: ['claude-sonnet-4-5'], target: 'claude-sonnet-4-5', index: 0, fallbacks: 0 })).toBe('the only model (fallback_on_error: claude-sonnet-4-5)')
  })
})
