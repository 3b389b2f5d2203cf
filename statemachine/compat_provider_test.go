package statemachine

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// wireProviders is testdata/wire/providers-v1.txt: providers, a linked
// queue's settings, the provider ops and a link's result as their first
// release wrote them.
const wireProviders = "testdata/wire/providers-v1.txt"

func providerRecV1() providerRec {
	return providerRec{Provider: Provider{Namespace: "acme", Name: "anthropic", RPM: 600, InputTPM: 400_000, OutputTPM: 80_000},
		Linked: 2, Members: []ProviderMember{{Shard: 0, Gen: 1, In: true}, {Shard: 3, Gen: 4, In: false}}}
}

func linkedConfigV1() QueueConfig {
	return QueueConfig{MaxConcurrency: 4, RateLimit: 10, RateWindowMs: 1000, Provider: "anthropic"}
}

func providerOpsV1() []Op {
	return []Op{
		&SetProviderOp{Provider: providerRecV1().Provider},
		&SetProviderOp{Provider: Provider{Name: "openai"}, Delete: true},
		&LinkProviderOp{Queue: "acme/llm", Provider: "anthropic"},
		&ProviderMemberOp{Namespace: "acme", Member: ProviderMember{Name: "anthropic", Shard: 2, Gen: 7, In: true}},
	}
}

func linkResultsV1() []Result {
	return []Result{{Queue: "acme/llm", Members: []ProviderMember{{Name: "old", Shard: 1, Gen: 2}, {Name: "anthropic", Shard: 1, Gen: 3, In: true}}}}
}

func wireRecordsProviders() map[string][]byte {
	r, c := providerRecV1(), linkedConfigV1()
	e := Entry{ID: NewEntryID(1_770_000_000_000_000_000, 13), Now: 1_770_000_000_000_000_001, Ops: providerOpsV1()}
	return map[string][]byte{"provider": r.appendTo(nil), "config": c.appendTo(nil), "providers.entry": e.Encode(nil),
		"link.results": AppendResults(nil, linkResultsV1())}
}

// TestWireFixtureProviders: provider records, linked queue settings, the
// provider ops and a link's results keep decoding to the same values and
// encoding to the same bytes; a queue's settings without a provider keep
// their earlier bytes.
func TestWireFixtureProviders(t *testing.T) {
	t.Parallel()
	old := checkWireFixture(t, wireProviders, "# Providers as their first release wrote them.\n"+
		"# Frozen: never regenerate. Values: compat_provider_test.go.\n", wireRecordsProviders())
	requireDecodes(t, old["provider"], providerRecV1())
	requireDecodes(t, old["config"], linkedConfigV1())
	require.Equal(t, providerOpsV1(), decodeWireOps(t, old["providers.entry"]))
	rs, err := DecodeResults(old["link.results"])
	require.NoError(t, err)
	require.Equal(t, linkResultsV1(), rs)
	plain := QueueConfig{Paused: true, MaxConcurrency: 1}
	require.Equal(t, []byte{1, 1, 1, 0, 0}, plain.appendTo(nil), "no provider: the bytes of before")
}
