// The namespace in the header: always shown; a picker when the session may
// act in more than one (an admin: every namespace; a single sign-on user:
// those it has grants in). Choosing one sets the corvo_namespace cookie and
// reloads the page, so every view and the event stream follow.
import type { WhoAmI } from '../api'
import { switchNamespace, useNamespaceChoices } from '../namespace'

export function NamespacePicker({ who }: { who: WhoAmI }) {
  const choices = useNamespaceChoices(who)
  if (!who.namespace) return null
  if (choices.length < 2) {
    return <span class="ns" data-testid="who-namespace" title="Namespace">{who.namespace}</span>
  }
  return (
    <select
      class="ns-picker" aria-label="Namespace" title="Namespace" data-testid="ns-picker" value={who.namespace}
      onChange={(e) => {
        const ns = (e.target as HTMLSelectElement).value
        if (ns !== who.namespace) switchNamespace(ns)
      }}
    >
      {choices.map((ns) => <option key={ns} value={ns}>{ns}</option>)}
    </select>
  )
}
