package statemachine

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCloneJobOwnsItsBytes: a job decoded from a buffer and cloned keeps
// its values when the buffer is overwritten (a Pebble value released
// after the read, a Raft entry dragonboat reuses) — its chain's step,
// handler and config bytes included, which the next chain step is built
// from.
func TestCloneJobOwnsItsBytes(t *testing.T) {
	j := Job{ID: "job_0_01J00000000000000000000000", Queue: "q", Payload: []byte(`{"a":1}`),
		JobOptions: JobOptions{Tags: []byte(`{"t":"x"}`)},
		Chain: &Chain{ID: "job_0_01J00000000000000000000000", Steps: []ChainTarget{{Queue: "q", Payload: []byte(`{"step":0}`)}, {Queue: "r", Shard: 1, Payload: []byte(`{"step":1}`)}},
			OnFailure: &ChainTarget{Queue: "f", Payload: []byte(`{"h":"failure"}`)}, OnExit: &ChainTarget{Queue: "e", Payload: []byte(`{"h":"exit"}`)},
			Config: []byte(`{"steps":[]}`)},
		DependsOn: []Dep{{ID: "job_1_01J00000000000000000000001", Shard: 1}}}
	buf := j.appendTo(nil)
	var d Job
	dd := dec{b: buf}
	d.decode(&dd)
	require.NoError(t, dd.err)
	c := cloneJob(d)
	for i := range buf {
		buf[i] = 'X'
	}
	require.Equal(t, j, c)
	// And the clone shares nothing with what it was cloned from.
	c2 := cloneJob(c)
	c2.Chain.Steps[1].Payload[2] = 'Z'
	c2.Chain.OnExit.Payload[2] = 'Z'
	c2.DependsOn[0].Shard = 3
	require.Equal(t, j, c)
}
