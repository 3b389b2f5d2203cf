package statemachine

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// pool is shards sharing provider p (RPM limit rpm), each hosting one
// linked queue q{i} with jobs waiting; every shard knows every member.
func pool(t *testing.T, n int, p Provider) []*testBundle {
	shards := make([]*testBundle, n)
	for i := range shards {
		shards[i], _ = setupShard(t, uint32(i))
		shards[i].setProvider(p)
	}
	for i, tb := range shards {
		q := fmt.Sprint("q", i)
		tb.fill(q, 200)
		for _, m := range tb.link(q, p.Name).Members {
			for _, o := range shards {
				require.Equal(t, StatusOK, o.one(&ProviderMemberOp{Member: m}).Status)
			}
		}
	}
	return shards
}

func proposerOf(shards []*testBundle) ShareProposer {
	return func(sh uint32, op *ProviderShareOp) (Result, error) { return shards[sh].one(op), nil }
}

// TestProviderShareHandOver: shard 0 uses its equal share (5 of 10) at
// once; the shares are then rebalanced to 1 and 9. Every second both
// shards fetch all they may and every 5 s the hand-over runs again: the
// requests handed out by both in any minute never exceed the limit —
// shard 1 is raised only as shard 0's window empties — and once it has,
// shard 1 gets its 9 a minute.
func TestProviderShareHandOver(t *testing.T) {
	t.Parallel()
	p := Provider{Name: "p", RPM: 10}
	shards := pool(t, 2, p)
	var times [2][]time.Time
	fetch := func() {
		for i, tb := range shards {
			for range tb.fetch(100, fmt.Sprint("q", i)) {
				times[i] = append(times[i], tb.now)
			}
		}
	}
	inWindow := func(i int, now time.Time) int {
		n := 0
		for _, at := range times[i] {
			if at.After(now.Add(-time.Minute)) && !at.After(now) {
				n++
			}
		}
		return n
	}
	for range shards[0].fetch(100, "q0") {
		times[0] = append(times[0], shards[0].now)
	}
	require.Equal(t, []int{5, 0}, []int{len(times[0]), len(times[1])}, "shard 0 took its whole equal share")
	plan := []ProviderShare{{RPM: 1, InputTPM: -1, OutputTPM: -1}, {RPM: 9, InputTPM: -1, OutputTPM: -1}}
	members := []uint32{0, 1}
	gen := uint64(0)
	var after []ProviderShare
	for sec := 1; sec <= 150; sec++ {
		for _, tb := range shards {
			tb.advance(time.Second)
		}
		if sec%5 == 1 {
			gen++
			var err error
			after, err = HandOver(p, gen, members, plan, proposerOf(shards))
			require.NoError(t, err)
			if sec == 1 {
				require.Equal(t, []int64{1, 5}, []int64{after[0].RPM, after[1].RPM},
					"shard 0 lowered; shard 1 not raised while shard 0's window holds 5")
			}
		}
		fetch()
		now := shards[0].now
		require.LessOrEqual(t, inWindow(0, now)+inWindow(1, now), 10, "second %d: the pool handed out more than its limit in a minute", sec)
	}
	require.Equal(t, plan, after)
	require.Equal(t, 9, inWindow(1, shards[1].now), "shard 1 gets its rebalanced share")
	for i, tb := range shards {
		require.Equal(t, plan[i], tb.providers()[0].Share)
		require.Equal(t, gen, tb.providers()[0].ShareGen)
	}
}

// TestProviderShareOpRules: a lowering op never raises and needs a newer
// generation; a raise needs the generation the share holds; both need
// the members the shard knows. A link that changes the members caps the
// rebalanced shares by the equal split; new limits drop them.
func TestProviderShareOpRules(t *testing.T) {
	t.Parallel()
	p := Provider{Name: "p", RPM: 10, OutputTPM: 1000}
	shards := pool(t, 3, p)
	two := shards[:2]
	// Shard 2 leaves: two members.
	for _, m := range shards[2].link("q2", "").Members {
		for _, o := range shards {
			o.one(&ProviderMemberOp{Member: m})
		}
	}
	members := []uint32{0, 1}
	share := func(sh int) ProviderShare { return shards[sh].providers()[0].Share }
	op := func(sh int, gen uint64, raise bool, rpm, out int64, m ...uint32) Result {
		if m == nil {
			m = members
		}
		return two[sh].one(&ProviderShareOp{Name: "p", Gen: gen, Members: m, Share: ProviderShare{RPM: rpm, OutputTPM: out}, Raise: raise})
	}
	r := op(0, 5, false, 8, 100)
	require.Equal(t, StatusOK, r.Status, r.Message)
	require.Equal(t, &ProviderShareState{Gen: 5, Share: ProviderShare{RPM: 5, InputTPM: -1, OutputTPM: 100}}, r.Share, "lowering keeps the smaller")
	require.Equal(t, StatusConflict, op(0, 5, false, 1, 1).Status, "same generation")
	require.Equal(t, StatusConflict, op(0, 4, false, 1, 1).Status, "older generation")
	require.Equal(t, StatusConflict, op(0, 6, true, 9, 900).Status, "a raise under another generation")
	require.Equal(t, StatusConflict, op(0, 6, false, 1, 1, 0, 1, 2).Status, "other members")
	require.Equal(t, StatusConflict, op(0, 6, false, 1, 1, 1).Status, "without itself")
	require.Equal(t, ProviderShare{RPM: 5, InputTPM: -1, OutputTPM: 100}, share(0), "refusals change nothing")
	r = op(0, 5, true, 9, 2000)
	require.Equal(t, StatusOK, r.Status, r.Message)
	require.Equal(t, ProviderShare{RPM: 9, InputTPM: -1, OutputTPM: 1000}, r.Share.Share, "a raise is capped by the limit")
	require.Equal(t, StatusOK, op(1, 5, false, 1, 0).Status)
	require.Equal(t, ProviderShare{RPM: 1, InputTPM: -1, OutputTPM: 0}, share(1))
	for _, bad := range []*ProviderShareOp{{Name: "", Gen: 9, Members: members}, {Name: "p", Gen: 0, Members: members},
		{Name: "p", Gen: 9, Members: []uint32{1, 0}}} {
		require.Equal(t, StatusInvalid, two[0].one(bad).Status, "%+v", bad)
	}
	require.Equal(t, StatusNotFound, two[0].one(&ProviderShareOp{Name: "nope", Gen: 9, Members: members}).Status)

	// Shard 2 joins again: shard 0's 9 is capped by the equal split (4),
	// shard 1's 1 stays; shard 2 takes its equal 3.
	for _, m := range shards[2].link("q2", "p").Members {
		for _, o := range shards {
			o.one(&ProviderMemberOp{Member: m})
		}
	}
	require.Equal(t, []int64{4, 1, 3}, []int64{share(0).RPM, share(1).RPM, share(2).RPM})
	// New limits: the equal split again.
	for _, o := range shards {
		o.setProvider(Provider{Name: "p", RPM: 30})
	}
	require.Equal(t, []int64{10, 10, 10}, []int64{share(0).RPM, share(1).RPM, share(2).RPM})
	// Reopened, a shard keeps its rebalanced share.
	require.Equal(t, StatusOK, shards[0].one(&ProviderShareOp{Name: "p", Gen: 7, Members: []uint32{0, 1, 2}, Share: ProviderShare{RPM: 2}}).Status)
	shards[0].reopen()
	require.Equal(t, int64(2), share(0).RPM)
}

// TestProviderShareRivalHandOvers: a second hand-over that lowers the
// members between the first one's stages makes the first one's raises
// refused, so the pool never counts a share twice.
func TestProviderShareRivalHandOvers(t *testing.T) {
	t.Parallel()
	p := Provider{Name: "p", RPM: 10}
	shards := pool(t, 2, p)
	members := []uint32{0, 1}
	base := proposerOf(shards)
	rival := false
	propose := func(sh uint32, op *ProviderShareOp) (Result, error) {
		if op.Raise && !rival {
			rival = true
			// The rival plans the other way round and lowers both first.
			_, err := HandOver(p, 2, members, []ProviderShare{{RPM: 9}, {RPM: 1}}, base)
			require.NoError(t, err)
		}
		return base(sh, op)
	}
	after, err := HandOver(p, 1, members, []ProviderShare{{RPM: 1}, {RPM: 9}}, propose)
	require.NoError(t, err)
	require.Equal(t, int64(5), after[1].RPM, "the first hand-over's raise was refused")
	s0, s1 := shards[0].providers()[0].Share.RPM, shards[1].providers()[0].Share.RPM
	require.Equal(t, []int64{9, 1}, []int64{s0, s1}, "the rival's plan stands")
	require.LessOrEqual(t, s0+s1, int64(10))
}

// TestPlanShares: busy members (more jobs waiting than their room) split
// what the idle ones leave; an idle one keeps its recent use and a
// quarter, at least the floor; with all busy, none, or a limit too
// small, the equal split.
func TestPlanShares(t *testing.T) {
	t.Parallel()
	p := Provider{Name: "p", RPM: 600, InputTPM: 100_000}
	rpm := func(plan []ProviderShare) []int64 {
		var out []int64
		for _, s := range plan {
			out = append(out, s.RPM)
		}
		return out
	}
	busy, idle := ShareMember{Shard: 0, Pending: 7}, ShareMember{Shard: 1}
	plan := PlanShares(p, []ShareMember{busy, idle})
	require.Equal(t, []int64{585, 15}, rpm(plan))
	require.Equal(t, ProviderShare{RPM: 15, InputTPM: 2500, OutputTPM: -1}, plan[1])
	idle.Held = ProviderShare{RPM: 100}
	require.Equal(t, []int64{475, 125}, rpm(PlanShares(p, []ShareMember{busy, idle})))
	require.Equal(t, []int64{300, 300}, rpm(PlanShares(p, []ShareMember{busy, busy})))
	require.Equal(t, []int64{300, 300}, rpm(PlanShares(p, []ShareMember{idle, idle})))
	require.Equal(t, []int64{200, 200, 200}, rpm(PlanShares(Provider{RPM: 600}, []ShareMember{busy, {Held: ProviderShare{RPM: 500}}, busy})),
		"an idle member holding most of the limit leaves too little: equal")
	require.Equal(t, []int64{2, 1}, rpm(PlanShares(Provider{RPM: 3}, []ShareMember{busy, idle})), "too small to rebalance")
	// Jobs waiting that the member's room covers leave it idle; more make
	// it busy.
	covered := ShareMember{Share: ProviderShare{RPM: 15}, Held: ProviderShare{RPM: 5}, Pending: 10}
	require.Equal(t, []int64{585, 15}, rpm(PlanShares(p, []ShareMember{busy, covered})))
	covered.Pending = 11
	require.Equal(t, []int64{300, 300}, rpm(PlanShares(p, []ShareMember{busy, covered})))
	members := []ShareMember{{Share: ProviderShare{RPM: 300, InputTPM: 50_000, OutputTPM: -1}, Pending: 1000}, {Share: ProviderShare{RPM: 300, InputTPM: 50_000, OutputTPM: -1}}}
	require.True(t, SharesDiffer(p, members, PlanShares(p, members)))
	require.False(t, SharesDiffer(p, members, []ProviderShare{{RPM: 305, InputTPM: 51_000, OutputTPM: -1}, {RPM: 295, InputTPM: 49_000, OutputTPM: -1}}), "within a fiftieth")
}

// TestShareResultRoundTrip: a ProviderShareOp's answer travels between
// nodes whole, beside results without one.
func TestShareResultRoundTrip(t *testing.T) {
	t.Parallel()
	rs := []Result{{Queue: "q"}, {Status: StatusConflict, Message: "m", Share: &ProviderShareState{Gen: 1 << 60,
		Share: ProviderShare{RPM: 5, InputTPM: -1, OutputTPM: 7}, Held: ProviderShare{RPM: 9, InputTPM: 1 << 40, OutputTPM: 0}}}}
	got, err := DecodeResults(AppendResults(nil, rs))
	require.NoError(t, err)
	require.Equal(t, rs, got)
}
