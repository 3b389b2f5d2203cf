// A bounded in-memory time series for the charts: the UI samples the
// queues' counters as they arrive and keeps the last `cap` points.
export class Series {
  readonly t: number[] = []
  readonly cols = new Map<string, (number | null)[]>()
  constructor(readonly cap = 360) {}

  // add appends one sample at time `ts` (seconds); names not seen before
  // get nulls for the past, names missing now get a null.
  add(ts: number, values: Record<string, number | null>) {
    if (this.t.length && ts <= this.t[this.t.length - 1]) return
    this.t.push(ts)
    for (const k of Object.keys(values)) {
      if (!this.cols.has(k)) this.cols.set(k, new Array(this.t.length - 1).fill(null))
    }
    for (const [k, col] of this.cols) col.push(k in values ? values[k] : null)
    if (this.t.length > this.cap) {
      const drop = this.t.length - this.cap
      this.t.splice(0, drop)
      for (const col of this.cols.values()) col.splice(0, drop)
    }
  }

  get length() { return this.t.length }

  clear() {
    this.t.length = 0
    this.cols.clear()
  }

  // data gives uPlot's columns for the named series (in order).
  data(names: string[]): [number[], ...(number | null)[][]] {
    return [this.t.slice(), ...names.map((n) => (this.cols.get(n) ?? new Array(this.t.length).fill(null)).slice())]
  }
}
