package statemachine

import (
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"
)

// wireImportAI is testdata/wire/import-ai-v1.txt: the imports of a
// restore that carry issue 20's records (a job's usage records and
// scores, a budget with its daily spend, a cache entry, a queue's daily
// usage totals) as their first release wrote them.
const wireImportAI = "testdata/wire/import-ai-v1.txt"

func importAIOpsV1() []Op {
	v := JobView{Job: routedJobV1(), State: routedStateV1(), Errors: []JobError{errorV2()},
		Usage: []UsageRecord{{N: 1, Attempt: 1, StartedAt: 1_769_999_980_000_000_000, Phase: PhaseHeartbeat, At: 1_769_999_990_000_000_000, Queue: "q",
			Usage: Usage{InputTokens: 100, OutputTokens: 20, CacheReadTokens: 5, Model: "big", Provider: "fake", CostNanos: 1_500_000, LatencyMs: 800}}},
		Scores: []ScoreRecord{scoreRecordV1()}}
	return []Op{
		&ImportOp{Job: &JobExport{View: v, Resolved: []string{"job_3_01JDDDDDDDDDDDDDDDDDDDDDDD"}}},
		&ImportOp{Budget: &BudgetExport{Budget: Budget{Namespace: "acme", Queue: "acme/llm", DailyNanos: 5e9, PerJobNanos: 1e8, OnExceed: BudgetActionReject},
			Spend: []DaySpend{{Day: 20495, Nanos: 4e9}, {Day: 20496, Nanos: 1}}}},
		&ImportOp{Cache: &CacheExport{Queue: "acme/llm", Key: "9f86d081884c7d65",
			Entry: CacheEntry{JobID: "job_1_01JAAAAAAAAAAAAAAAAAAAAAAA", CompletedAt: 1_770_000_000_000_000_000, ExpiresAt: 1_770_003_600_000_000_000, CostNanos: 1_500_000}}},
		&ImportOp{UsageDay: &UsageDayExport{Day: 20496, QueueUsage: QueueUsage{Queue: "acme/llm",
			UsageTotals: UsageTotals{InputTokens: 100, OutputTokens: 20, CacheCreationTokens: 3, CacheReadTokens: 5, CostNanos: 1_500_000, Reports: 2}}}},
	}
}

func wireRecordsImportAI() map[string][]byte {
	e := Entry{ID: NewEntryID(1_770_000_000_000_000_000, 13), Now: 1_770_000_000_000_000_001, Ops: importAIOpsV1()}
	return map[string][]byte{"import.entry": e.Encode(nil)}
}

// TestWireFixtureImportAI: the imports of issue 20's records keep
// decoding to the same values and encoding to the same bytes.
func TestWireFixtureImportAI(t *testing.T) {
	t.Parallel()
	old := checkWireFixture(t, wireImportAI, "# Imports of usage, scores, budgets, cache entries and daily usage totals as their first release wrote them.\n"+
		"# Frozen: never regenerate. Values: compat_import_test.go.\n", wireRecordsImportAI())
	require.Equal(t, importAIOpsV1(), decodeWireOps(t, old["import.entry"]))
}

// usageScoresTails are the bytes a job's usage records and scores add
// after the rest of a MoveInOp or an ImportOp's job, as their first
// release wrote them (the usage list is written, empty, before scores).
var usageScoresTails = []struct {
	name   string
	usage  bool
	scores bool
	tail   string
}{
	{"none", false, false, ""},
	{"usage", true, false, "012c01010180e0c9c5d3e6a690310180f0a8869ee7a690310171c80128000a036269670466616b65c08db701c00c"},
	{"scores", false, true, "00013b010171808088c7e8e7a690310968756d616e3a616e6e026f6b02086163637572616379f1faa8b8bd94dcf63f04746f6e6580808080808080f8bf01"},
	{"both", true, true, "012c01010180e0c9c5d3e6a690310180f0a8869ee7a690310171c80128000a036269670466616b65c08db701c00c" +
		"013b010171808088c7e8e7a690310968756d616e3a616e6e026f6b02086163637572616379f1faa8b8bd94dcf63f04746f6e6580808080808080f8bf01"},
}

// TestUsageScoresEncoding: appendUsageScores, and the moved and imported
// jobs that use it, write usage records and scores as the same frozen
// bytes, each list left out while it and the later one are empty, and
// decodeUsageScores reads them back.
func TestUsageScoresEncoding(t *testing.T) {
	t.Parallel()
	for _, c := range usageScoresTails {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			bare := JobView{Job: routedJobV1(), State: routedStateV1(), Errors: []JobError{}}
			v := bare
			if c.usage {
				v.Usage = importAIOpsV1()[0].(*ImportOp).Job.View.Usage
			}
			if c.scores {
				v.Scores = []ScoreRecord{scoreRecordV1()}
			}
			e := enc{}
			appendUsageScores(&e, v.Usage, v.Scores)
			require.Equal(t, c.tail, hex.EncodeToString(e.b))
			d := dec{b: e.b}
			usage, scores := decodeUsageScores(&d)
			require.NoError(t, d.err)
			require.Empty(t, d.b)
			require.Equal(t, v.Usage, usage)
			require.Equal(t, v.Scores, scores)
			for _, ops := range [][2]Op{
				{&MoveInOp{bare}, &MoveInOp{v}},
				{&ImportOp{Job: &JobExport{View: bare, Resolved: []string{"x"}}}, &ImportOp{Job: &JobExport{View: v, Resolved: []string{"x"}}}},
			} {
				head, body := ops[0].appendBody(nil), ops[1].appendBody(nil)
				require.Equal(t, head, body[:len(head)], "%T", ops[1])
				require.Equal(t, c.tail, hex.EncodeToString(body[len(head):]), "%T", ops[1])
				got, err := decodeOp(ops[1].Code(), body)
				require.NoError(t, err)
				require.Equal(t, ops[1], got)
			}
		})
	}
}
