// The UI's first paint, measured in a file of its own so that Playwright's
// tracing (on for the other tests, to keep a failure's trace) can be off:
// it records every navigation, and what is measured is the page, not the
// harness.
import { test, expect } from '@playwright/test'
import { mkdirSync, writeFileSync } from 'node:fs'

test.use({ trace: 'off' })

const desktop = { width: 1440, height: 900 }

// First paint of the dashboard from a cold browser context (no cache),
// the median of 5 loads; the figure goes to test-results/perf.json (and
// BENCHMARKS.md), not into an assertion on time. One load first warms the
// browser's own processes (a user's browser is already running) and is
// counted in no figure.
test('first paint', async ({ browser }) => {
  const runs: { fcp: number | null; dcl: number | null; bytes: number }[] = []
  for (let i = -1; i < 5; i++) {
    const ctx = await browser.newContext({ viewport: desktop, baseURL: process.env.CORVO_E2E_URL })
    const page = await ctx.newPage()
    await page.goto('/ui/')
    await expect(page.getByTestId('stat-pending')).not.toHaveText('…')
    await page.waitForLoadState('load')
    runs.push(await page.evaluate(() => {
      const n = performance.getEntriesByType('navigation')[0] as PerformanceNavigationTiming | undefined
      const assets = (performance.getEntriesByType('resource') as PerformanceResourceTiming[]).concat(n ? [n] : [])
        .filter((e) => !e.name.includes('/api/') && !e.name.includes('/healthz'))
      return {
        fcp: performance.getEntriesByName('first-contentful-paint')[0]?.startTime ?? null,
        dcl: n ? n.domContentLoadedEventEnd : null,
        bytes: assets.reduce((t, e) => t + (e.transferSize || 0), 0),
      }
    }))
    if (i < 0) runs.pop() // the warm-up
    await ctx.close()
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]
  expect(runs.every((r) => r.fcp !== null)).toBe(true)
  const perf = { first_contentful_paint_ms: median(runs.map((r) => r.fcp!)), dom_content_loaded_ms: median(runs.map((r) => r.dcl ?? 0)), transferred_bytes: median(runs.map((r) => r.bytes)), runs }
  mkdirSync('test-results', { recursive: true })
  writeFileSync('test-results/perf.json', JSON.stringify(perf, null, 2) + '\n')
  console.log('UI first paint:', JSON.stringify({ ...perf, runs: undefined }))
})
