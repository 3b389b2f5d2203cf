package mirror

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/corvohq/corvo/statemachine"
)

// TestMirrorSearchPartial: a search whose context ends answers the matches
// it read by then, in order, as a partial page whose cursor continues
// without a gap or a repeat; one that read none answers a DeadlineError
// naming the criteria no index serves. The context is cancelled from the
// row hook, so the cut falls after an exact row.
func TestMirrorSearchPartial(t *testing.T) {
	t.Parallel()
	m := openTest(t)
	var ch []statemachine.JobChange
	for i := 1; i <= 10; i++ {
		v := view(i, "q", "pending", `{"n":1}`)
		ch = append(ch, statemachine.JobChange{ID: v.Job.ID, Job: &v.Job, State: v.State})
	}
	feed(t, m, 1, ch...)

	ctx, cancel := context.WithCancel(context.Background())
	m.testRowRead = func(n int) {
		if n == 3 {
			cancel()
		}
	}
	f := Filter{PayloadJQ: ".n == 1", Limit: 5, Desc: true}
	p, err := m.Search(ctx, f)
	require.NoError(t, err)
	require.True(t, p.Partial)
	require.True(t, p.HasMore)
	require.Equal(t, []string{"010", "009", "008"}, ids(p), "newest first, the three read before the cut")
	require.Equal(t, 3, p.Total, "a lower bound: what was found")

	m.testRowRead = nil
	f.Cursor, f.Limit = p.Cursor, 50
	rest, err := m.Search(context.Background(), f)
	require.NoError(t, err)
	require.False(t, rest.Partial)
	require.Equal(t, []string{"007", "006", "005", "004", "003", "002", "001"}, ids(rest), "the cursor continues after the last match")

	// Nothing read before the deadline: the error names what has no index.
	done, stop := context.WithCancel(context.Background())
	stop()
	_, err = m.Search(done, Filter{Queue: "q", PayloadJQ: ".n == 2", Tags: map[string]string{"a": "b"}})
	var de *DeadlineError
	require.ErrorAs(t, err, &de)
	require.Equal(t, []string{"payload_jq", "tags"}, de.Unindexed)
	require.True(t, errors.Is(err, context.Canceled))
	_, err = m.Search(done, Filter{Queue: "q", States: []string{"pending"}})
	require.ErrorAs(t, err, &de)
	require.Empty(t, de.Unindexed, "queue and state have indexes")
}

// TestMirrorSearchLeavesLargePayloadsOut: a page carries payloads up to
// PagePayloadMax; a larger one is left out (nil) with its size, and the
// columns after it are still read right (the payload is the row's last
// column).
func TestMirrorSearchLeavesLargePayloadsOut(t *testing.T) {
	t.Parallel()
	m := openTest(t)
	big := `{"pad":"` + strings.Repeat("x", PagePayloadMax) + `"}`
	small := `{"n":1}`
	vb, vs := view(1, "q", "dead", big), view(2, "q", "dead", small)
	vb.State.LastError, vb.State.Reason = "boom", "gave up"
	feed(t, m, 1, statemachine.JobChange{ID: vb.Job.ID, Job: &vb.Job, State: vb.State}, statemachine.JobChange{ID: vs.Job.ID, Job: &vs.Job, State: vs.State})

	p, err := m.Search(context.Background(), Filter{Queue: "q"})
	require.NoError(t, err)
	require.Len(t, p.Jobs, 2)
	gotBig, gotSmall := p.Jobs[0], p.Jobs[1] // oldest first
	require.JSONEq(t, small, string(gotSmall.Payload))
	require.Equal(t, len(small), gotSmall.PayloadBytes)
	require.Nil(t, gotBig.Payload)
	require.Equal(t, len(big), gotBig.PayloadBytes)
	require.Equal(t, "boom", *gotBig.LastError)
	require.Equal(t, "gave up", *gotBig.Reason)
	require.JSONEq(t, `{"tenant":"acme"}`, string(gotBig.Tags))

	// Payload filters still see every payload.
	p, err = m.Search(context.Background(), Filter{PayloadContains: "xxxx"})
	require.NoError(t, err)
	require.Equal(t, []string{"001"}, ids(p))
}

// TestMirrorWaitForCutsTheFlushWindow: a reader waiting for changes the
// writer is still collecting has them flushed at once, not at the end of
// the flush window (an hour here: without the cut the wait would end
// only with the test's own deadline).
func TestMirrorWaitForCutsTheFlushWindow(t *testing.T) {
	t.Parallel()
	m, err := Open(Config{Path: filepath.Join(t.TempDir(), "mirror.db"), Logger: zerolog.Nop(), Shards: 1, FlushWindow: time.Hour})
	require.NoError(t, err)
	require.NoError(t, m.Start(fakeSource{}))
	t.Cleanup(m.Close)
	v := view(1, "q", "pending", `{}`)
	m.Applied(&statemachine.AppliedInfo{ShardID: 1, Index: 7, Changes: []statemachine.JobChange{{ID: v.Job.ID, Job: &v.Job, State: v.State}}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, m.WaitFor(ctx, m.Mark()))
	p, err := m.Search(ctx, Filter{Queue: "q"})
	require.NoError(t, err)
	require.Equal(t, []string{"001"}, ids(p))
}
