package gateway

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

type confirmationRequired struct {
	Error       string `json:"error"`
	Code        string `json:"code"`
	WouldAffect int    `json:"would_affect"`
}

// TestAPIBulkNeedsConfirmation: a bulk action whose filter selects every
// job of a queue, or of the cluster, is refused without "confirm": true —
// saying how many jobs it would touch — and changes nothing; a narrowing
// filter or explicit job IDs need no confirmation.
func TestAPIBulkNeedsConfirmation(t *testing.T) {
	t.Parallel()
	const n = 12
	q := uq("bulkconfirm")
	ids := enqueueMany(t, q, n, nil)
	mirrorHas(t, map[string]any{"queue": q}, n)

	allStates := []string{"pending", "active", "scheduled", "retrying", "held", "completed", "dead", "cancelled"}
	for _, body := range []map[string]any{
		{"filter": map[string]any{"queue": q}, "action": "delete"},
		{"filter": map[string]any{"queue": q, "state": allStates, "limit": 5, "sort": "created_at"}, "action": "cancel"},
		{"filter": map[string]any{"queue": q, "state": []string{}, "tags": map[string]string{}}, "action": "move", "move_to_queue": q + "-elsewhere"},
		{"filter": map[string]any{"queue": q}, "action": "delete", "async": true},
		{"filter": map[string]any{"queue": q}, "action": "delete", "confirm": false},
	} {
		code, out := call(t, "POST", "/api/v1/jobs/bulk", body)
		require.Equal(t, 400, code, string(out))
		e := mustJSON[confirmationRequired](t, out)
		require.Equal(t, "confirmation_required", e.Code)
		require.Equal(t, n, e.WouldAffect)
		require.Contains(t, e.Error, strconv.Itoa(n)+" jobs")
		require.Contains(t, e.Error, q)
	}
	// The whole cluster: at least this test's jobs.
	code, out := call(t, "POST", "/api/v1/jobs/bulk", map[string]any{"filter": map[string]any{}, "action": "delete"})
	require.Equal(t, 400, code, string(out))
	e := mustJSON[confirmationRequired](t, out)
	require.Equal(t, "confirmation_required", e.Code)
	require.GreaterOrEqual(t, e.WouldAffect, n)
	require.Contains(t, e.Error, "every job of the cluster")
	require.Equal(t, n, queueStats(t, q).Pending, "nothing was deleted")

	// A narrowing filter goes ahead without confirmation.
	code, out = call(t, "POST", "/api/v1/jobs/bulk", map[string]any{"filter": map[string]any{"queue": q, "state": []string{"pending"}},
		"action": "change_priority", "priority": "high"})
	require.Equal(t, 200, code, string(out))
	require.Equal(t, n, mustJSON[struct{ Affected int }](t, out).Affected)
	// So do explicit job IDs.
	code, out = call(t, "POST", "/api/v1/jobs/bulk", map[string]any{"job_ids": ids[:1], "action": "delete"})
	require.Equal(t, 200, code, string(out))
	require.Equal(t, 1, mustJSON[struct{ Affected int }](t, out).Affected)
	mirrorHas(t, map[string]any{"queue": q}, n-1)
	// And a confirmed whole-queue action runs.
	code, out = call(t, "POST", "/api/v1/jobs/bulk", map[string]any{"filter": map[string]any{"queue": q}, "action": "delete", "confirm": true})
	require.Equal(t, 200, code, string(out))
	require.Equal(t, n-1, mustJSON[struct{ Affected int }](t, out).Affected)
	require.Zero(t, queueStats(t, q).Pending)
}
