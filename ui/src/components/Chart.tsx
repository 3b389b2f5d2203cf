// A uPlot line chart that follows the theme and its container's width.
// uPlot: ~20 KB gzipped, draws thousands of points on a canvas in well
// under a millisecond per frame, no dependencies. Loaded as a chunk of its
// own (charts.tsx) after the page first paints.
import { useEffect, useRef } from 'preact/hooks'
import uPlot from 'uplot'
import 'uplot/dist/uPlot.min.css'

import type { ChartProps } from './charts'

function axisColor() {
  return getComputedStyle(document.documentElement).getPropertyValue('--muted').trim() || '#888'
}
function gridColor() {
  return getComputedStyle(document.documentElement).getPropertyValue('--grid').trim() || 'rgba(128,128,128,.15)'
}

// xRange is the time axis: the data's span, at least a minute, and the five
// minutes before now when there is no data yet.
export function xRange(min: number | null, max: number | null, now: number): [number, number] {
  if (min == null || max == null || !Number.isFinite(min) || !Number.isFinite(max)) return [now - 300, now]
  return [Math.min(min, max - 60), max]
}

export function Chart({ title, series, data, height = 180, unit, summary }: ChartProps) {
  const box = useRef<HTMLDivElement>(null)
  const plot = useRef<uPlot | null>(null)
  const key = series.map((s) => s.label + s.color).join('|') + (document.documentElement.dataset.theme ?? '')

  useEffect(() => {
    const el = box.current
    if (!el) return
    const fmt = unit ?? ((v: number) => String(Math.round(v * 100) / 100))
    const opts: uPlot.Options = {
      width: Math.max(200, el.clientWidth),
      height,
      legend: { show: true, live: false },
      cursor: { drag: { x: false, y: false } },
      // At least the last minute, so a chart with few samples still reads
      // as "recent" rather than spanning years; before the first sample
      // (min and max null) the last five minutes, not uPlot's guess.
      scales: { x: { time: true, range: (_u, min, max) => xRange(min, max, Date.now() / 1000) }, y: { range: (_u, _min, max) => [0, max > 0 ? max * 1.1 : 1] } },
      axes: [
        { stroke: axisColor(), grid: { stroke: gridColor(), width: 1 }, ticks: { stroke: gridColor() } },
        { stroke: axisColor(), grid: { stroke: gridColor(), width: 1 }, ticks: { stroke: gridColor() }, size: 56, values: (_u, vals) => vals.map((v) => fmt(v)) },
      ],
      series: [
        {},
        ...series.map((s) => ({
          label: s.label,
          stroke: s.color,
          width: 2,
          fill: s.fill ? s.color + '22' : undefined,
          points: { show: false },
          spanGaps: false,
          value: (_u: uPlot, v: number | null) => (v === null || v === undefined ? '—' : fmt(v)),
        })),
      ],
    }
    const u = new uPlot(opts, data as uPlot.AlignedData, el)
    plot.current = u
    const ro = new ResizeObserver(() => u.setSize({ width: Math.max(200, el.clientWidth), height }))
    ro.observe(el)
    return () => { ro.disconnect(); u.destroy(); plot.current = null }
    // Rebuilt only when the set of series or the theme changes; data flows in below.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [key, height])

  useEffect(() => { plot.current?.setData(data as uPlot.AlignedData) }, [data])

  return (
    <figure class="chart" data-points={data[0].length}>
      <figcaption>{title}</figcaption>
      <div ref={box} role="img" aria-label={`${title}: ${summary}`} />
    </figure>
  )
}
