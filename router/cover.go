package router

import "slices"

// Group is one node of a shard cover and the shards to ask it for.
type Group struct {
	Addr string
	// Also lists the other nodes that host every shard of the group, best
	// first: where to go when Addr cannot be reached.
	Also   []string
	Shards []int
}

// Cover groups shards by a node that hosts them, so that few nodes are
// asked: greedily, the node hosting the most of the shards not yet grouped
// takes all of those (ties: the node ranked best in some shard's list,
// then the one listed first). hosts lists, for each shard, the nodes that
// host it, best first. A group's shards keep their order in shards.
// uncovered holds the shards no node hosts, in their order.
//
// Routing to several nodes at once — a fetch over queues, a search, an
// event stream — plans with it; it does no I/O.
func Cover(shards []int, hosts map[int][]string) (groups []Group, uncovered []int) {
	var left []int
	for _, sh := range shards {
		if len(hosts[sh]) == 0 {
			uncovered = append(uncovered, sh)
		} else {
			left = append(left, sh)
		}
	}
	for len(left) > 0 {
		var order []string
		count, rank := map[string]int{}, map[string]int{}
		for _, sh := range left {
			for i, a := range hosts[sh] {
				if r, seen := rank[a]; !seen {
					order, rank[a] = append(order, a), i
				} else if i < r {
					rank[a] = i
				}
			}
			for _, a := range uniq(hosts[sh]) {
				count[a]++
			}
		}
		best := order[0]
		for _, a := range order[1:] {
			if count[a] > count[best] || (count[a] == count[best] && rank[a] < rank[best]) {
				best = a
			}
		}
		g := Group{Addr: best}
		var rest []int
		for _, sh := range left {
			if slices.Contains(hosts[sh], best) {
				g.Shards = append(g.Shards, sh)
			} else {
				rest = append(rest, sh)
			}
		}
		for _, a := range CommonHosts(g.Shards, hosts) {
			if a != best {
				g.Also = append(g.Also, a)
			}
		}
		groups = append(groups, g)
		left = rest
	}
	return groups, uncovered
}

// CommonHosts lists the nodes that host every one of shards, in the order
// of the first shard's list (none when shards is empty).
func CommonHosts(shards []int, hosts map[int][]string) []string {
	if len(shards) == 0 {
		return nil
	}
	var out []string
	for _, a := range hosts[shards[0]] {
		in := true
		for _, sh := range shards[1:] {
			if !slices.Contains(hosts[sh], a) {
				in = false
				break
			}
		}
		if in && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// uniq is list without repeats (a node listed twice for a shard hosts it
// once).
func uniq(list []string) []string {
	for i, a := range list {
		if slices.Contains(list[:i], a) {
			out := slices.Clone(list[:i])
			for _, b := range list[i:] {
				if !slices.Contains(out, b) {
					out = append(out, b)
				}
			}
			return out
		}
	}
	return list
}
