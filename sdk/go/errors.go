package corvo

// The stable codes of the server's error answers (Error.Code), one per row
// of the "Errors" table of docs/api.md. The server's table
// (gateway/errors.go) is the source; a test of the server keeps these in
// step with it.
const (
	CodeInvalidJSON             = "invalid_json"              // 400
	CodeInvalidRequest          = "invalid_request"           // 400
	CodeBadRequest              = "bad_request"               // 400
	CodeFilterNeedsIndex        = "filter_needs_index"        // 400
	CodeConfirmationRequired    = "confirmation_required"     // 400
	CodeLeaseRequired           = "lease_required"            // 400
	CodeUnauthorized            = "unauthorized"              // 401
	CodeClusterSecretRequired   = "cluster_secret_required"   // 401
	CodePeerCertificateRequired = "peer_certificate_required" // 401
	CodeForbidden               = "forbidden"                 // 403
	CodeClusterSecretInvalid    = "cluster_secret_invalid"    // 403
	CodeCrossOrigin             = "cross_origin"              // 403
	CodeNotFound                = "not_found"                 // 404
	CodeMethodNotAllowed        = "method_not_allowed"        // 405
	CodeConflict                = "conflict"                  // 409
	CodeRemoveFailed            = "remove_failed"             // 409
	CodeWrongNode               = "wrong_node"                // 409
	CodeResultSchemaInvalid     = "result_schema_invalid"     // 422
	CodePayloadTooLarge         = "payload_too_large"         // 413
	CodeBatchTooLarge           = "batch_too_large"           // 413
	CodeBulkTooLarge            = "bulk_too_large"            // 413
	CodeUnsupportedMediaType    = "unsupported_media_type"    // 415
	CodeHeadersTooLarge         = "headers_too_large"         // 431
	CodeOverloaded              = "overloaded"                // 429
	CodeRateLimited             = "rate_limited"              // 429
	CodeBudgetExceeded          = "budget_exceeded"           // 429
	CodeBulkBusy                = "bulk_busy"                 // 429
	CodeReadsBusy               = "reads_busy"                // 429
	CodeInternal                = "internal"                  // 500
	CodeJoinFailed              = "join_failed"               // 500, 503
	CodeUnavailable             = "unavailable"               // 503
	CodeShuttingDown            = "shutting_down"             // 503
	CodeInsufficientStorage     = "insufficient_storage"      // 507
)
