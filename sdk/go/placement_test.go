package corvo

import (
	"fmt"
	"testing"
)

// TestShardForQueueGolden: the SDK's queue → shard rule is the server's
// (router.TestShardForQueueGolden pins the same table), namespaced queues
// hash as the server stores them, and job IDs give their shard.
func TestShardForQueueGolden(t *testing.T) {
	got := ""
	for _, q := range []string{"default", "emails.send", "emails.bulk", "reports", "a", "q0", "q1", "q2"} {
		got += fmt.Sprintf("%s=%d ", q, shardForQueue(storedQueue("", q), 4))
	}
	if want := "default=2 emails.send=0 emails.bulk=0 reports=2 a=3 q0=1 q1=0 q2=2 "; got != want {
		t.Fatalf("shards %q, want %q", got, want)
	}
	if storedQueue("default", "q") != "q" || storedQueue("acme", "q") != "acme/q" {
		t.Fatal("stored queue names")
	}
	for id, want := range map[string]int{"job_3_01HX7Y2K3M0000000000000000": 3, "job_12_01HX": 12, "job_x_1": -1, "batch_1_x": -1, "job_7": -1} {
		if got := shardOfJobID(id); got != want {
			t.Fatalf("shardOfJobID(%q) = %d, want %d", id, got, want)
		}
	}
}

// planPlacement puts each shard's leader first, then its other placed
// nodes that are up; one node, or no shards, route nothing.
func TestPlanPlacement(t *testing.T) {
	st := &ClusterStatus{ShardCount: 2,
		Nodes: []ClusterNode{{NodeID: 1, HTTPAddress: "a:1", Status: "up"}, {NodeID: 2, HTTPAddress: "b:1", Status: "up"}, {NodeID: 3, HTTPAddress: "c:1", Status: "down"}},
		Shards: []ShardStatus{{ShardID: 1, LeaderNode: 2, PlacedNodes: []uint64{1, 2, 3}}, {ShardID: 2, LeaderNode: 3, PlacedNodes: []uint64{3, 1}}}}
	p := planPlacement(st, "http://", "acme")
	if p == nil || p.ns != "acme" || fmt.Sprint(p.hosts) != "[[http://b:1 http://a:1] [http://a:1]]" {
		t.Fatalf("placement %+v", p)
	}
	st.Nodes = st.Nodes[:1]
	if p := planPlacement(st, "http://", ""); p != nil {
		t.Fatalf("one node: placement %+v", p)
	}
}
