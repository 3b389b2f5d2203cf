import { JobSearch } from '../components/JobSearch'

const PRESETS = {
  all: { title: 'Jobs', path: '/jobs', intro: 'Search every job on every queue: by state, payload text, a jq filter, errors, tags and time.' },
  dead: { title: 'Dead letters', path: '/dead', intro: 'Jobs that ran out of attempts, expired or were rejected, most recently dead first. Retry resets their attempts; Requeue keeps them.' },
  held: { title: 'Held jobs', path: '/held', intro: 'Jobs waiting for approval or for their dependencies. Approve or reject them from the job page.' },
} as const

export function JobsPage({ query, preset }: { query: URLSearchParams; preset: keyof typeof PRESETS }) {
  const p = PRESETS[preset]
  return (
    <section aria-labelledby="h-jobs">
      <div class="page-head"><h1 id="h-jobs">{p.title}</h1><p class="muted small head-intro">{p.intro}</p></div>
      <JobSearch
        key={preset}
        basePath={p.path}
        query={query}
        fixedStates={preset === 'dead' ? ['dead'] : preset === 'held' ? ['held'] : undefined}
        actions={preset === 'dead' ? ['retry', 'requeue', 'move', 'delete'] : preset === 'held' ? ['cancel', 'move', 'delete'] : undefined}
        collapsible={preset !== 'all'}
        defaultSort={preset === 'dead' ? 'completed_at' : undefined}
      />
    </section>
  )
}
