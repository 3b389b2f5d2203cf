package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/corvohq/corvo/internal/intern"
	corvo "github.com/corvohq/corvo/sdk/go"
	"github.com/corvohq/corvo/statemachine"
)

// Request decoding shared by every handler: strict JSON (decodeBody,
// jsonError), the request limits, durations and priorities. Each
// endpoint's request types live next to its handler.

// Request limits (documented in docs/api.md).
const (
	MaxBatchJobsDefault  = 10000
	MaxPayloadDefault    = 1 << 20
	maxTags              = 64
	maxTagKey            = 128
	maxTagValue          = 1024
	maxFetchCount        = 1000
	maxFetchTimeout      = 120 // seconds
	maxErrorText         = 64 << 10
	maxLeaseSeconds      = 24 * 3600
	maxRetriesLimit      = 1000
	maxWorkerIDLen       = 256
	defaultFetchQueueMax = 64
	maxUniqueKey         = 1024
	maxDependsOn         = 100
	maxUniquePeriod      = 365 * 24 * 3600
)

// decodeBody parses a JSON object strictly: unknown or duplicate fields,
// wrong types, invalid UTF-8 and trailing data are errors. An empty body is
// allowed only when allowEmpty. It uses json v2 (go-json-experiment, the
// code behind encoding/json/v2): several times faster than encoding/json
// on the hot enqueue and fetch bodies, and strict by default.
func decodeBody(body []byte, v any, allowEmpty bool) *apiError {
	if len(bytes.TrimSpace(body)) == 0 {
		if allowEmpty {
			return nil
		}
		return codeInvalidJSON.errf("request body is required")
	}
	if err := json.Unmarshal(body, v, json.RejectUnknownMembers(true)); err != nil {
		return jsonError(err)
	}
	return nil
}

func jsonError(err error) *apiError {
	var se *json.SemanticError
	var syn *jsontext.SyntacticError
	switch {
	case errors.As(err, &syn):
		return codeInvalidJSON.errf("malformed JSON at byte %d: %v", syn.ByteOffset, syn.Err)
	case errors.As(err, &se):
		field := strings.TrimPrefix(string(se.JSONPointer), "/")
		switch {
		case errors.Is(se.Err, json.ErrUnknownName):
			return invalid("unknown field %q", field)
		case errors.Is(se.Err, io.ErrUnexpectedEOF):
			return codeInvalidJSON.errf("malformed JSON: unexpected end of input")
		case field == "":
			return codeInvalidJSON.errf("request body must be a JSON object")
		case se.GoType != nil && se.JSONKind != 0:
			return invalid("field %q must be %s, not %s", field, jsonKind(se.GoType.String()), kindName(se.JSONKind))
		}
		return invalid("field %q: %v", field, se.Err)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return codeInvalidJSON.errf("malformed JSON: unexpected end of input")
	}
	return codeInvalidJSON.errf("malformed JSON: %v", err)
}

func kindName(k jsontext.Kind) string {
	switch k {
	case 'n':
		return "null"
	case 'f', 't':
		return "a boolean"
	case '"':
		return "a string"
	case '0':
		return "a number"
	case '{':
		return "an object"
	case '[':
		return "an array"
	}
	return k.String()
}

func jsonKind(goType string) string {
	goType = strings.TrimPrefix(goType, "*")
	switch {
	case strings.HasPrefix(goType, "map["):
		return "an object"
	case strings.HasPrefix(goType, "[]"):
		return "an array"
	case strings.Contains(goType, "int"):
		return "an integer"
	case strings.Contains(goType, "float"):
		return "a number"
	case strings.Contains(goType, "string"):
		return "a string"
	case strings.Contains(goType, "bool"):
		return "a boolean"
	}
	return goType
}

// rawOrNil treats an absent or JSON-null raw value as unset.
func rawOrNil(r jsontext.Value) []byte {
	if len(r) == 0 || string(r) == "null" {
		return nil
	}
	return r
}

func parseDuration(field, s string, allowZero bool) (int64, *apiError) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, invalid("field %q: %q is not a duration (use e.g. \"500ms\", \"5s\", \"10m\", \"1h\")", field, s)
	}
	if d < 0 || (!allowZero && d == 0) {
		return 0, invalid("field %q must be positive", field)
	}
	return d.Milliseconds(), nil
}

// parsePriority reads the "priority" of a request: a tier name, or the
// earlier Corvo's number (0 critical, 1 high, 2 normal), so producers
// written for it keep working; answers always name the tier. set is false
// when the field is absent or null. Every priority a request carries
// (enqueue, batch enqueue, schedules, bulk change_priority, search
// filters) goes through it.
func parsePriority(v jsontext.Value) (p statemachine.Priority, set bool, err error) {
	if len(v) == 0 || string(v) == "null" {
		return 0, false, nil
	}
	switch v.Kind() {
	case '"':
		var name string
		if json.Unmarshal(v, &name) == nil {
			if p, ok := statemachine.ParsePriority(name); ok {
				return p, true, nil
			}
		}
	case '0':
		if n, err := strconv.ParseUint(string(v), 10, 8); err == nil && n <= uint64(statemachine.PriorityNormal) {
			return statemachine.Priority(n), true, nil
		}
	}
	if len(v) > 40 {
		v = append(v[:37:37], "..."...)
	}
	return 0, false, fmt.Errorf("unknown value %s (use critical, high or normal, or 0, 1 or 2)", v)
}

// parsePriorityName reads a priority the SDK's Priority type decoded (a
// name; numbers became names): nil is unset.
func parsePriorityName(v *corvo.Priority) (p statemachine.Priority, set bool, err error) {
	if v == nil {
		return 0, false, nil
	}
	if p, ok := statemachine.ParsePriority(string(*v)); ok {
		return p, true, nil
	}
	return 0, false, fmt.Errorf("unknown value %q (use critical, high or normal, or 0, 1 or 2)", string(*v))
}

// queueList is a request's list of queue names, decoded into a slice
// sized for the usual few and with each name interned (names): a fetch
// of 8 queues decoded into a []string made 12 allocations, 8 of them the
// same names each time. Anything but a list of plain strings decodes as a
// []string would, errors included.
type queueList []string

// UnmarshalJSONFrom implements json.UnmarshalerFrom.
func (l *queueList) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	if dec.PeekKind() != '[' {
		return json.UnmarshalDecode(dec, (*[]string)(l))
	}
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	out := (*l)[:0]
	if cap(out) == 0 {
		out = make([]string, 0, 8)
	}
	for dec.PeekKind() != ']' {
		if dec.PeekKind() != '"' {
			var s string // an error as a []string gives, or null: ""
			if err := json.UnmarshalDecode(dec, &s); err != nil {
				return err
			}
			out = append(out, s)
			continue
		}
		v, err := dec.ReadValue()
		if err != nil {
			return err
		}
		raw := v[1 : len(v)-1]
		if bytes.IndexByte(raw, '\\') >= 0 {
			u, err := jsontext.AppendUnquote(nil, v)
			if err != nil {
				return err
			}
			raw = u
		}
		out = append(out, names.Get(raw))
	}
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	*l = out
	return nil
}

// names interns the queue names requests carry (bounded: a client
// sending new names cannot grow it).
var names intern.Shared
