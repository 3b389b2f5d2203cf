package gateway

import (
	"net/http"
	"testing"
	"time"

	"github.com/corvohq/corvo/mirror"
	"github.com/corvohq/corvo/statemachine"
)

// baseURL is one in-process server (real shards, real HTTP, the mirror and
// the event ring) shared by the API tests; each test uses its own queue
// names.
var baseURL string

// testEngine is the engine behind baseURL (for tests that put a second
// gateway in front of the same shards).
var testEngine Engine

// testMirror is the mirror behind baseURL.
var testMirror *mirror.Mirror

// testEventsCapacity is the event ring's size in tests: small enough that
// a test can push old events out.
const testEventsCapacity = 200000

// testReadTimeout is the read deadline of the tests' servers: long, so a
// loaded machine does not cut their searches (readpool_test tests the
// deadline itself). A search then waits up to half of it for the mirror.
const testReadTimeout = 10 * time.Second

// testClusterSecret is the cluster credential of every server the tests
// start (frontServer gives it to those that set none).
const testClusterSecret = "test-cluster-secret-0123456789abcdef"

// The test server: TestMain (main_test.go, package gateway_test) starts
// one node through the node package — the same assembly as `corvo
// server` — and hands it to the tests here.

// SetTestServer records the test server (TestMain).
func SetTestServer(url string, eng Engine, mir *mirror.Mirror) {
	baseURL, testEngine, testMirror = url, eng, mir
}

// AppliedHook is the hook the tests' applied-entry watchers hang off.
func AppliedHook(info *statemachine.AppliedInfo) { testApplied(info) }

// Test settings TestMain gives the node.
const (
	TestClusterSecret   = testClusterSecret
	TestEventsCapacity  = testEventsCapacity
	TestReadTimeout     = testReadTimeout
	TestEventsKeepalive = 300 * time.Millisecond
)

// CallWith is callWith for the tests of package gateway_test (their own
// nodes, their own client): a JSON body (or a string as is), declared
// application/json on POST and PUT; it answers the status and body.
func CallWith(t *testing.T, c *http.Client, method, url string, body any) (int, []byte) {
	t.Helper()
	return callWith(t, c, method, url, body)
}

// MustJSON is mustJSON for the tests of package gateway_test.
func MustJSON[T any](t *testing.T, b []byte) T {
	t.Helper()
	return mustJSON[T](t, b)
}
