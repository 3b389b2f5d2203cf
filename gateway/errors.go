package gateway

import (
	"fmt"
	"slices"
)

// errorCode is one row of the error table: a stable code, the HTTP status
// it is sent with, and what it means. Every error the gateway writes is
// built from a row (apiError has no other constructor but relayed, which
// hands on another node's answer), the "Errors" table of docs/api.md lists
// the same rows, and the Go SDK exports every code as a constant:
// errors_test.go keeps the three in step.
type errorCode struct {
	Code    string
	Status  int
	Also    []int // other statuses the code is sent with (withStatus)
	Meaning string
}

// The error table: every code the API answers, with its status and
// meaning (docs/api.md's "Errors" table is checked against it).
var (
	codeInvalidJSON = &errorCode{Code: "invalid_json", Status: 400,
		Meaning: "malformed JSON, empty body where one is required, trailing data"}
	codeInvalidRequest = &errorCode{Code: "invalid_request", Status: 400,
		Meaning: "a missing or invalid field, a wrong JSON type, an unknown field, an unknown value (`priority`, `retry_backoff`, …), an unparseable duration or timestamp, an invalid query parameter"}
	codeBadRequest = &errorCode{Code: "bad_request", Status: 400,
		Meaning: "the request cannot be read at all (broken HTTP framing), or a node-to-node entry cannot be decoded"}
	codeFilterNeedsIndex = &errorCode{Code: "filter_needs_index", Status: 400,
		Meaning: "a search found no match before its deadline (`--read-timeout`, 1 s by default) because the criteria the message names have no index and were tested job by job; narrow it with `queue`, `state`, `created_after`/`created_before`, `batch_id`, `depends_on` or `job_id_prefix`"}
	codeConfirmationRequired = &errorCode{Code: "confirmation_required", Status: 400,
		Meaning: "a bulk action whose filter selects every job of a queue or of the cluster, without `\"confirm\": true`; `would_affect` says how many jobs it would touch"}
	codeLeaseRequired = &errorCode{Code: "lease_required", Status: 400,
		Meaning: "under `--strict-leases`, an ack, ack batch item, fail or heartbeat job without the lease's `attempt` (see [Leases](#leases))"}
	codeUnauthorized = &errorCode{Code: "unauthorized", Status: 401,
		Meaning: "the route needs an API key and none was given, or the key is malformed, unknown, revoked, disabled or expired (see [Authentication](#authentication)); `WWW-Authenticate: Bearer` is set"}
	codeClusterSecretRequired = &errorCode{Code: "cluster_secret_required", Status: 401,
		Meaning: "a node-to-node route called without the `X-Corvo-Cluster-Secret` header"}
	codePeerCertificateRequired = &errorCode{Code: "peer_certificate_required", Status: 401,
		Meaning: "a node-to-node route called, on a cluster with mutual TLS between nodes, without a client certificate issued by the peer CA"}
	codeClusterSecretInvalid = &errorCode{Code: "cluster_secret_invalid", Status: 403,
		Meaning: "a node-to-node route called with a wrong cluster secret (or on a node with none)"}
	codeForbidden = &errorCode{Code: "forbidden", Status: 403,
		Meaning: "the API key's role lacks the permission the route needs, or its queue scope does not cover the queue (see [Authentication](#authentication))"}
	codeCrossOrigin = &errorCode{Code: "cross_origin", Status: 403,
		Meaning: "a `POST`, `PUT` or `DELETE` from a web page of another origin (see [Requests from browsers](#requests-from-browsers))"}
	codeNotFound = &errorCode{Code: "not_found", Status: 404,
		Meaning: "unknown job id (including ids Corvo could never have issued), batch, bulk operation, schedule or endpoint"}
	codeMethodNotAllowed = &errorCode{Code: "method_not_allowed", Status: 405,
		Meaning: "wrong method for an endpoint"}
	codeConflict = &errorCode{Code: "conflict", Status: 409,
		Meaning: "ack/fail/heartbeat of a job this worker no longer holds (completed, reclaimed, cancelled, or held by another worker/attempt); cancel of a completed/dead/cancelled job; retry of a job that is not finished; move of an active job; cancel of a bulk operation that has finished"}
	codeRemoveFailed = &errorCode{Code: "remove_failed", Status: 409,
		Meaning: "the cluster could not remove the node (the message says why)"}
	codeWrongNode = &errorCode{Code: "wrong_node", Status: 409,
		Meaning: "a node-removal notice reached a node other than the one removed"}
	codePayloadTooLarge = &errorCode{Code: "payload_too_large", Status: 413,
		Meaning: "payload over `--max-payload` (default 1 MiB); request body over 64 MiB, or over what the memory budget (`--max-memory`) lets requests hold at once"}
	codeBatchTooLarge = &errorCode{Code: "batch_too_large", Status: 413,
		Meaning: "more than 10,000 jobs in a batch enqueue"}
	codeBulkTooLarge = &errorCode{Code: "bulk_too_large", Status: 413,
		Meaning: "a bulk operation names or matches more than 100,000 jobs"}
	codeUnsupportedMediaType = &errorCode{Code: "unsupported_media_type", Status: 415,
		Meaning: "a `POST` or `PUT` whose `Content-Type` is not `application/json` (missing, `text/plain`, a form…), even with an empty body"}
	codeResultSchemaInvalid = &errorCode{Code: "result_schema_invalid", Status: 422,
		Meaning: "an ack's result does not match the job's `result_schema`; `validation_errors` lists why (`[{\"path\", \"message\"}]`); the job stays active under its lease, so the worker may ack again"}
	codeHeadersTooLarge = &errorCode{Code: "headers_too_large", Status: 431,
		Meaning: "the request line and headers together are over 8 KiB"}
	codeOverloaded = &errorCode{Code: "overloaded", Status: 429,
		Meaning: "the shard's proposal queue is full, or the node's memory budget (`--max-memory`) cannot hold the request body now; retry after `Retry-After` seconds"}
	codeRateLimited = &errorCode{Code: "rate_limited", Status: 429,
		Meaning: "the API key is over its request rate on this node (default 2,000 reads and 1,000 writes a second; see [Authentication](#authentication)); `Retry-After` is set"}
	codeBudgetExceeded = &errorCode{Code: "budget_exceeded", Status: 429,
		Meaning: "an enqueue (or a job of a batch enqueue) is covered by a budget with `on_exceed: reject` whose daily limit is spent; nothing is enqueued; `budget` names it and `resets_at` is the next UTC midnight; the SDKs do not retry it (see [Budgets](#budgets))"}
	codeBulkBusy = &errorCode{Code: "bulk_busy", Status: 429,
		Meaning: "4 background bulk operations already run on this node"}
	codeReadsBusy = &errorCode{Code: "reads_busy", Status: 429,
		Meaning: "a search, list or job read found every read slot of the node taken (`--read-concurrency`) and its queue full, or waited for a slot until its deadline (`--read-timeout`); a search that found nothing before its deadline while every criterion has an index; `Retry-After` is set"}
	codeInsufficientStorage = &errorCode{Code: "insufficient_storage", Status: 507,
		Meaning: "this node's data volume has less free space than `--min-free-disk`: enqueue, batch enqueue, schedule creation and update, move and restore are refused until space is freed (acks, fails, fetches, deletes, cancels, bulk actions and reads still work); `Retry-After` is set"}
	codeInternal = &errorCode{Code: "internal", Status: 500,
		Meaning: "an unexpected server error (a bug, or an unreadable answer from another node)"}
	codeJoinFailed = &errorCode{Code: "join_failed", Status: 500, Also: []int{503},
		Meaning: "a node could not be added to the cluster; 503 when the cluster is not ready yet (retry)"}
	codeUnavailable = &errorCode{Code: "unavailable", Status: 503,
		Meaning: "no Raft leader committed the write in time (it may or may not have applied), the shard's node cannot be reached, or the feature needs the mirror or event stream this server runs without; `Retry-After` is set"}
	codeShuttingDown = &errorCode{Code: "shutting_down", Status: 503,
		Meaning: "the server is stopping; `Retry-After` is set"}
)

// errorCodes is the table, in the order docs/api.md lists it.
var errorCodes = []*errorCode{
	codeInvalidJSON, codeInvalidRequest, codeBadRequest, codeFilterNeedsIndex, codeConfirmationRequired, codeLeaseRequired,
	codeUnauthorized, codeClusterSecretRequired, codePeerCertificateRequired, codeForbidden, codeClusterSecretInvalid, codeCrossOrigin,
	codeNotFound, codeMethodNotAllowed,
	codeConflict, codeRemoveFailed, codeWrongNode,
	codePayloadTooLarge, codeBatchTooLarge, codeBulkTooLarge, codeUnsupportedMediaType,
	codeResultSchemaInvalid, codeHeadersTooLarge,
	codeOverloaded, codeRateLimited, codeBudgetExceeded, codeBulkBusy, codeReadsBusy,
	codeInternal, codeJoinFailed,
	codeUnavailable, codeShuttingDown,
	codeInsufficientStorage,
}

// apiError is a client error: an HTTP status, a stable code and a message.
// Build it from a row of the error table (err, errf), never by hand.
type apiError struct {
	status int
	code   string
	msg    string
}

func (e *apiError) Error() string { return e.msg }

// err is the row's error with message msg.
func (c *errorCode) err(msg string) *apiError {
	return &apiError{status: c.Status, code: c.Code, msg: msg}
}

// errf is the row's error with a formatted message.
func (c *errorCode) errf(format string, args ...any) *apiError {
	return c.err(fmt.Sprintf(format, args...))
}

// withStatus sends e with another status its row allows (Also); any other
// status leaves e as it is.
func (e *apiError) withStatus(status int) *apiError {
	for _, c := range errorCodes {
		if c.Code == e.code && slices.Contains(c.Also, status) {
			e.status = status
		}
	}
	return e
}

// invalid is the common 400 invalid_request.
func invalid(format string, args ...any) *apiError {
	return codeInvalidRequest.errf(format, args...)
}

// relayed is another node's error answer, handed on as that node's
// handler wrote it (the status and code come from the same table there).
func relayed(status int, code, msg string) *apiError {
	return &apiError{status: status, code: code, msg: msg}
}
