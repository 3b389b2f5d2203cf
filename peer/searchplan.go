package peer

import (
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/corvohq/corvo/router"
)

// SearchPart is the shards one node is asked to search.
type SearchPart struct {
	Addr   string
	Shards []int
}

// planSearch covers shards with nodes that host them (router.Cover over
// Targets), skipping the given addresses. It returns what no node covers.
func (c *Client) planSearch(shards []int, skip map[string]bool) (parts []SearchPart, uncovered []int) {
	hosts := make(map[int][]string, len(shards))
	for _, sh := range shards {
		for _, addr := range c.Targets(sh) {
			if !skip[addr] {
				hosts[sh] = append(hosts[sh], addr)
			}
		}
	}
	groups, uncovered := router.Cover(shards, hosts)
	for _, g := range groups {
		parts = append(parts, SearchPart{Addr: g.Addr, Shards: g.Shards})
	}
	return parts, uncovered
}

// SearchShards runs the part of a search (body) over shards this node
// does not hold on other nodes: a covering set of them (planSearch), each
// asked for its shards in parallel (Search). The shards of a part that
// failed with a 503 are planned again over the nodes not tried yet, until
// every shard has answered or no node is left (503); any other failure (a
// node's 4xx answer to the request itself) ends the search with it. The
// answers come back in no particular order: the caller merges them.
func (c *Client) SearchShards(ns string, shards []int, body []byte, deadline time.Time) ([]*SearchAnswer, *Error) {
	return askCovering(c, shards, " the search", func(p SearchPart) (*SearchAnswer, *Error) {
		return c.Search(p.Addr, ns, p.Shards, body, deadline)
	})
}

// askCovering asks a covering set of nodes for shards (planSearch), each
// part in parallel (ask), and plans the shards of a part that failed with
// a 503 again over the nodes not tried yet, until every shard has
// answered or no node is left (503, naming what); any other failure ends
// it. The answers come back in no particular order.
func askCovering[T any](c *Client, shards []int, what string, ask func(SearchPart) (T, *Error)) ([]T, *Error) {
	var out []T
	tried := map[string]bool{}
	why := ""
	for len(shards) > 0 {
		plan, uncovered := c.planSearch(shards, tried)
		if len(uncovered) > 0 {
			msg := "no node hosting shard " + strconv.Itoa(uncovered[0]) + " answered" + what
			if why != "" {
				msg += " (" + why + ")"
			}
			return nil, unavailable(msg)
		}
		type answer struct {
			res T
			err *Error
		}
		answers := make([]answer, len(plan))
		var wg sync.WaitGroup
		for i, p := range plan {
			wg.Add(1)
			go func() {
				defer wg.Done()
				answers[i].res, answers[i].err = ask(p)
			}()
		}
		wg.Wait()
		shards = shards[:0:0]
		for i, a := range answers {
			switch {
			case a.err == nil:
				out = append(out, a.res)
			case a.err.Status == 503:
				// Not asked again. (A node that answered is: it hosts
				// none of these shards, or the plan would have given
				// them to it.)
				tried[plan[i].Addr] = true
				why = plan[i].Addr + ": " + a.err.Msg
				shards = append(shards, plan[i].Shards...)
			default:
				return nil, a.err
			}
		}
		slices.Sort(shards)
	}
	return out, nil
}
