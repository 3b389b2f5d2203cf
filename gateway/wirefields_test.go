package gateway

import (
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	corvo "github.com/corvohq/corvo/sdk/go"
)

// jsonFields lists the JSON member names of a struct type, following
// embedded structs (as encoding/json and json v2 do), recursively into the
// struct types of its fields as "parent.child".
func jsonFields(t reflect.Type, prefix string, seen map[reflect.Type]bool) []string {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || seen[t] || t.PkgPath() == "time" {
		return nil
	}
	seen[t] = true
	defer delete(seen, t)
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		if f.Anonymous && name == "" {
			out = append(out, jsonFields(f.Type, prefix, seen)...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, prefix+name)
		out = append(out, jsonFields(f.Type, prefix+name+".", seen)...)
	}
	sort.Strings(out)
	return out
}

// TestRequestDecodersMatchSDKTypes: the gateway decodes request bodies into
// its own structs (pointer fields tell "absent" from zero, for validation);
// each must accept exactly the members of the SDK's request type, so a
// field added on one side only fails here.
func TestRequestDecodersMatchSDKTypes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		gateway   any
		sdk       any
		sdkExtras []string // members the SDK type has for its answers, not sent
	}{
		{"enqueue", enqueueRequest{}, corvo.EnqueueRequest{}, nil},
		{"enqueue batch", batchEnqueueRequest{}, corvo.EnqueueBatchRequest{}, nil},
		{"fetch", fetchRequest{}, corvo.FetchBody{}, nil},
		{"ack", ackRequest{}, corvo.Ack{}, []string{"job_id"}},
		{"ack batch", ackBatchRequest{}, corvo.AckBatchRequest{}, nil},
		{"fail", failRequest{}, corvo.Failure{}, nil},
		{"heartbeat", heartbeatRequest{}, corvo.HeartbeatRequest{}, nil},
		{"move", moveRequest{}, corvo.MoveRequest{}, nil},
		{"concurrency", concurrencyRequest{}, corvo.ConcurrencyRequest{}, nil},
		{"throttle", throttleRequest{}, corvo.Throttle{}, nil},
		{"schedule", scheduleRequest{}, corvo.Schedule{}, []string{"created_at", "id", "last_job_id", "last_run", "next_run", "paused"}},
		{"bulk", bulkRequest{}, corvo.BulkRequest{}, nil},
	} {
		g := jsonFields(reflect.TypeOf(c.gateway), "", map[reflect.Type]bool{})
		s := slices.DeleteFunc(jsonFields(reflect.TypeOf(c.sdk), "", map[reflect.Type]bool{}), func(f string) bool {
			return slices.Contains(c.sdkExtras, f)
		})
		if len(g) == 0 {
			t.Fatalf("%s: no fields found", c.name)
		}
		for _, f := range g {
			if !slices.Contains(s, f) {
				t.Errorf("%s: the gateway accepts %q, the SDK's %T does not declare it", c.name, f, c.sdk)
			}
		}
		for _, f := range s {
			if !slices.Contains(g, f) {
				t.Errorf("%s: the SDK's %T sends %q, the gateway does not accept it", c.name, c.sdk, f)
			}
		}
	}
}
