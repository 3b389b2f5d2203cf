package router

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCover(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		shards    []int
		hosts     map[int][]string
		groups    []Group
		uncovered []int
	}{
		{name: "nothing", shards: nil, hosts: nil, groups: nil, uncovered: nil},
		{name: "one node hosts all", shards: []int{0, 1, 2},
			hosts:  map[int][]string{0: {"A", "B"}, 1: {"B", "A"}, 2: {"A", "B"}},
			groups: []Group{{Addr: "A", Also: []string{"B"}, Shards: []int{0, 1, 2}}}},
		{name: "most shards first, ties to the first listed",
			shards: []int{0, 1, 2, 3},
			hosts:  map[int][]string{0: {"A"}, 1: {"A", "B"}, 2: {"B", "C"}, 3: {"C"}},
			groups: []Group{{Addr: "A", Shards: []int{0, 1}}, {Addr: "C", Shards: []int{2, 3}}}},
		{name: "the most shards wins over the best rank",
			shards: []int{0, 1, 2},
			hosts:  map[int][]string{0: {"A", "B"}, 1: {"B"}, 2: {"C", "B"}},
			groups: []Group{{Addr: "B", Also: nil, Shards: []int{0, 1, 2}}}},
		{name: "a tie goes to the best ranked",
			shards: []int{0, 1},
			hosts:  map[int][]string{0: {"B", "A"}, 1: {"A", "B"}},
			groups: []Group{{Addr: "B", Also: []string{"A"}, Shards: []int{0, 1}}}},
		{name: "a tie of rank goes to the first listed",
			shards: []int{5, 7},
			hosts:  map[int][]string{5: {"X"}, 7: {"Y"}},
			groups: []Group{{Addr: "X", Shards: []int{5}}, {Addr: "Y", Shards: []int{7}}}},
		{name: "fallbacks host the whole group",
			shards: []int{0, 1, 2},
			hosts:  map[int][]string{0: {"A", "B", "C"}, 1: {"A", "C"}, 2: {"D"}},
			groups: []Group{{Addr: "A", Also: []string{"C"}, Shards: []int{0, 1}}, {Addr: "D", Shards: []int{2}}}},
		{name: "a node listed twice counts once",
			shards: []int{0, 1},
			hosts:  map[int][]string{0: {"A", "A"}, 1: {"B"}},
			groups: []Group{{Addr: "A", Shards: []int{0}}, {Addr: "B", Shards: []int{1}}}},
		{name: "unhosted shards are reported in order",
			shards: []int{3, 0, 2, 1},
			hosts:  map[int][]string{0: {"A"}, 2: {}},
			groups: []Group{{Addr: "A", Shards: []int{0}}}, uncovered: []int{3, 2, 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			groups, uncovered := Cover(c.shards, c.hosts)
			require.Equal(t, c.groups, groups)
			require.Equal(t, c.uncovered, uncovered)
		})
	}
}

func TestCommonHosts(t *testing.T) {
	t.Parallel()
	hosts := map[int][]string{0: {"A", "B", "C"}, 1: {"C", "B"}, 2: {"B", "A"}}
	require.Equal(t, []string{"B", "C"}, CommonHosts([]int{0, 1}, hosts))
	require.Equal(t, []string{"B"}, CommonHosts([]int{0, 1, 2}, hosts))
	require.Equal(t, []string{"A", "B", "C"}, CommonHosts([]int{0}, hosts))
	require.Nil(t, CommonHosts(nil, hosts))
	require.Nil(t, CommonHosts([]int{0, 3}, hosts))
}
