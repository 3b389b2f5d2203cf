import { JobSearch } from '../components/JobSearch'

const PRESETS = {
  all: { title: 'Jobs', path: '/jobs', intro: 'Search every job on every queue: by state, payload text, a jq filter, errors, tags and time.' },
  dead: { title: 'Dead letters', path: '/dead', intro: 'Jobs that ran out of attempts, expired or were rejected. Retry them (attempts reset) or requeue them (history kept).' },
  held: { title: 'Held jobs', path: '/held', intro: 'Jobs waiting for approval or for their dependencies. Approve or reject them from the job page.' },
} as const

export function JobsPage({ query, preset }: { query: URLSearchParams; preset: keyof typeof PRESETS }) {
  const p = PRESETS[preset]
  return (
    <section aria-labelledby="h-jobs">
      <div class="page-head"><h1 id="h-jobs">{p.title}</h1></div>
      <p class="muted intro">{p.intro}</p>
      <JobSearch
        key={preset}
        basePath={p.path}
        query={query}
        fixedStates={preset === 'dead' ? ['dead'] : preset === 'held' ? ['held'] : undefined}
        actions={preset === 'dead' ? ['retry', 'requeue', 'move', 'delete'] : preset === 'held' ? ['cancel', 'move', 'delete'] : undefined}
      />
    </section>
  )
}
