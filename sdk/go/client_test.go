package corvo

import (
	"context"
	"testing"
	"time"
)

// A client given a dead node and a live one moves to the live one.
func TestClientFailsOverToTheNextNode(t *testing.T) {
	live := startServer(t)
	dead := "http://" + freeAddr(t) // nothing listens there
	c := New(dead + "," + live)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := c.Enqueue(ctx, EnqueueRequest{Queue: "sdk.failover", Payload: map[string]int{"n": 1}})
	if err != nil {
		t.Fatal(err)
	}
	if res.JobID == "" {
		t.Fatal("no job id")
	}
	if got := c.Nodes()[0]; got != live {
		t.Fatalf("current node %s, want %s", got, live)
	}
}

// Discover learns every node of a cluster, and the client keeps working
// when the node it was given is killed.
func TestClientDiscoverSurvivesNodeLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	first, firstCmd := startNode(t, "--node-id", "a")
	join := first[len("http://"):]
	startNode(t, "--node-id", "b", "--join", join)
	startNode(t, "--node-id", "c", "--join", join)
	c := New(first)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// The joiners report in once their replicas are up.
	for {
		if err := c.Discover(ctx); err != nil {
			t.Fatal(err)
		}
		if len(c.Nodes()) == 3 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("discovered %v", c.Nodes())
		case <-time.After(100 * time.Millisecond):
		}
	}
	// Shards reach the joiners through the placement: wait until every
	// shard has its 3 voting replicas before the founder goes.
	waitEveryShardOnEveryNode(t, ctx, c, 3)
	firstCmd.kill()
	res, err := c.Enqueue(ctx, EnqueueRequest{Queue: "sdk.discover", Payload: map[string]int{"n": 1}})
	if err != nil {
		t.Fatal(err)
	}
	job, err := c.Job(ctx, res.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if job.Queue != "sdk.discover" {
		t.Fatalf("job %+v", job)
	}
	// Those two went to the nodes hosting their shard (placement.go); a
	// request naming no shard goes to the client's current node, and
	// moves it on.
	if _, err := c.Queues(ctx); err != nil {
		t.Fatal(err)
	}
	if c.Nodes()[0] == first {
		t.Fatalf("still on the killed node: %v", c.Nodes())
	}
}
