package gateway

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"sort"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/valyala/fasthttp"

	"github.com/corvohq/corvo/statemachine"
)

// Result schemas (issue 20): a job enqueued with "result_schema" (JSON
// Schema 2020-12) completes only with a result that satisfies it.
//
// The gateway validates, not the state machine: a validator run inside
// apply would make every replica's state depend on the validator's code
// (two builds in a rolling upgrade could disagree about a result and
// diverge), and would compile schemas on the apply goroutine. The state
// machine only enforces that the check happened: an AckOp of a job with a
// schema applies only with SchemaChecked set, else it changes nothing and
// answers StatusSchemaRequired. So an ack costs nothing more for a job
// without a schema, and an ack of a job with one is proposed twice: the
// gateway then reads the schema from the job (immutable once enqueued),
// validates, and proposes again with the flag — or answers 422 and the job
// stays active under its lease.

// maxResultSchema bounds a result_schema's size.
const maxResultSchema = 64 << 10

// compiled caches compiled schemas by their bytes' hash; it is dropped
// whole when it holds maxCompiled of them.
var (
	compiledMu sync.Mutex
	compiled   = map[[32]byte]*jsonschema.Schema{}
)

const maxCompiled = 1024

// compileSchema compiles a result_schema (draft 2020-12 unless it names
// another with $schema). It never loads a remote $ref.
func compileSchema(raw []byte) (*jsonschema.Schema, error) {
	key := sha256.Sum256(raw)
	compiledMu.Lock()
	sch := compiled[key]
	compiledMu.Unlock()
	if sch != nil {
		return sch, nil
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(jsonschema.SchemeURLLoader{}) // no file, no network
	if err := c.AddResource("corvo:result_schema", doc); err != nil {
		return nil, err
	}
	if sch, err = c.Compile("corvo:result_schema"); err != nil {
		return nil, err
	}
	compiledMu.Lock()
	if len(compiled) >= maxCompiled {
		clear(compiled)
	}
	compiled[key] = sch
	compiledMu.Unlock()
	return sch, nil
}

// schemaViolation is one way a result fails its schema.
type schemaViolation struct {
	Path    string // a JSON pointer into the result ("" the whole)
	Message string
}

// validateResult checks a result (nil: none, validated as null) against
// a schema.
func validateResult(sch *jsonschema.Schema, result []byte) []schemaViolation {
	if len(result) == 0 {
		result = []byte("null")
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(result))
	if err != nil {
		return []schemaViolation{{Message: "the result is not JSON: " + err.Error()}}
	}
	err = sch.Validate(inst)
	var ve *jsonschema.ValidationError
	if err == nil {
		return nil
	}
	if !errors.As(err, &ve) {
		return []schemaViolation{{Message: err.Error()}}
	}
	var out []schemaViolation
	for _, u := range ve.BasicOutput().Errors {
		if u.Error == nil {
			continue
		}
		out = append(out, schemaViolation{Path: u.InstanceLocation, Message: u.Error.String()})
	}
	if len(out) == 0 {
		out = []schemaViolation{{Message: ve.Error()}}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// checkResult validates the result of an ack the state machine answered
// StatusSchemaRequired: it reads the job's schema from shard sh. nil:
// the result is valid (propose again with SchemaChecked).
func (s *Server) checkResult(sh int, id string, result []byte) ([]schemaViolation, *apiError) {
	v, err := s.read(sh, statemachine.GetJobQuery{ID: id})
	if err != nil {
		return nil, engineError(err)
	}
	jv, _ := v.(*statemachine.JobView)
	if jv == nil {
		return nil, codeNotFound.err("job " + id + " not found")
	}
	sch, cerr := compileSchema(jv.Job.ResultSchema)
	if cerr != nil {
		// It compiled at enqueue: a build that reads it differently.
		return nil, codeInternal.err("the job's result_schema does not compile: " + cerr.Error())
	}
	return validateResult(sch, result), nil
}

// schemaMessage is the error message of an invalid result.
func schemaMessage(vs []schemaViolation) string {
	msg := "the result does not match the job's result_schema"
	if len(vs) > 0 {
		p := vs[0].Path
		if p == "" {
			p = "/"
		}
		msg += ": " + p + ": " + vs[0].Message
	}
	return msg
}

// writeSchemaInvalid answers 422 result_schema_invalid with every
// violation.
func writeSchemaInvalid(ctx *fasthttp.RequestCtx, vs []schemaViolation) {
	b := append([]byte(`{"error":`), appendString(nil, schemaMessage(vs))...)
	b = append(b, `,"code":`...)
	b = appendString(b, codeResultSchemaInvalid.Code)
	b = append(b, `,"validation_errors":`...)
	b = appendViolations(b, vs)
	writeJSON(ctx, codeResultSchemaInvalid.Status, append(b, '}'))
}

func appendViolations(b []byte, vs []schemaViolation) []byte {
	b = append(b, '[')
	for i, v := range vs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"path":`...)
		b = appendString(b, v.Path)
		b = append(b, `,"message":`...)
		b = appendString(b, v.Message)
		b = append(b, '}')
	}
	return append(b, ']')
}
