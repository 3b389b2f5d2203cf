// The charts' props and palette, and Chart itself loaded on first use:
// uPlot is a third of the UI's code, and no page needs it to first paint.
// Until it is loaded a chart is its frame and caption, at its height.
import { lazy } from './lazy'

export interface ChartSeries { label: string; color: string; fill?: boolean }

export interface ChartProps {
  title: string
  series: ChartSeries[]
  data: [number[], ...(number | null)[][]]
  height?: number
  unit?: (v: number) => string
  summary: string // text alternative for screen readers
}

export const PALETTE = ['#3b82f6', '#10b981', '#ef4444', '#f59e0b', '#8b5cf6', '#06b6d4', '#ec4899', '#84cc16']

export const Chart = lazy<ChartProps>(() => import('./Chart').then((m) => m.Chart), ({ title, summary, height = 180 }) => (
  <figure class="chart">
    <figcaption>{title}</figcaption>
    <div role="img" aria-label={`${title}: ${summary}`} style={{ height: `${height + 30}px` }} />
  </figure>
))
