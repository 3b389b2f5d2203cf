package router

import (
	"errors"
	"fmt"
	"strings"
)

// Namespaces. Every queue belongs to one namespace. The default
// namespace's queues are stored under their own names; another
// namespace's under "<namespace>/<queue>" ('/' is not allowed in a queue
// name, so the two never meet). Everything keyed by queue (jobs, unique
// keys, limits, schedules, stats, the mirror's rows) is therefore
// separate per namespace without a second key. The gateway maps names in
// (NamespacedQueue, for the request's namespace) and out (DisplayQueue);
// the state machine never needs to know.

// DefaultNamespace is the namespace of everything not placed in another.
const DefaultNamespace = "default"

// NamespaceSep joins a namespace and a queue in a stored queue name.
const NamespaceSep = '/'

// MaxNamespaceLen is the longest namespace name.
const MaxNamespaceLen = 63

// ValidateNamespace enforces the namespace-name rules: 1–63 characters of
// lower-case letters, digits, '-' and '_', starting with a letter or digit.
func ValidateNamespace(ns string) error {
	if ns == "" {
		return errors.New("namespace name is empty")
	}
	if len(ns) > MaxNamespaceLen {
		return fmt.Errorf("namespace name is longer than %d characters", MaxNamespaceLen)
	}
	for i := 0; i < len(ns); i++ {
		c := ns[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '-' || c == '_') && i > 0:
		default:
			return fmt.Errorf("namespace name %q has an invalid character %q (allowed: a-z, 0-9, and - _ after the first)", ns, c)
		}
	}
	return nil
}

// NamespacedQueue is the stored name of queue q of namespace ns.
func NamespacedQueue(ns, q string) string {
	if ns == DefaultNamespace || ns == "" {
		return q
	}
	return ns + string(NamespaceSep) + q
}

// SplitQueue splits a stored queue name into its namespace and the name
// its namespace sees.
func SplitQueue(stored string) (ns, q string) {
	if i := strings.IndexByte(stored, NamespaceSep); i >= 0 {
		return stored[:i], stored[i+1:]
	}
	return DefaultNamespace, stored
}

// DisplayQueue is the name a stored queue name has inside its namespace.
func DisplayQueue(stored string) string {
	if i := strings.IndexByte(stored, NamespaceSep); i >= 0 {
		return stored[i+1:]
	}
	return stored
}

// QueueInNamespace reports whether the stored queue name belongs to ns.
func QueueInNamespace(stored, ns string) bool {
	i := strings.IndexByte(stored, NamespaceSep)
	if ns == DefaultNamespace || ns == "" {
		return i < 0
	}
	return i == len(ns) && stored[:i] == ns
}

// ValidateStoredQueue checks a stored queue name: a valid queue name,
// optionally behind a valid namespace (what a peer may propose).
func ValidateStoredQueue(stored string) error {
	ns, q := SplitQueue(stored)
	if ns != DefaultNamespace || strings.IndexByte(stored, NamespaceSep) >= 0 {
		if err := ValidateNamespace(ns); err != nil {
			return err
		}
		if ns == DefaultNamespace {
			return errors.New("the default namespace's queues have no prefix")
		}
	}
	return ValidateQueueName(q)
}
