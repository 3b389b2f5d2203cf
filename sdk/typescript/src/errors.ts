// Errors: every error answer of the server is {"error", "code"}; the client
// throws it as a CorvoError (or the subclass for its status) carrying the
// HTTP status, the stable code and the server's Retry-After.

/** The stable codes of the server's error answers (docs/api.md, "Errors"). */
export const ErrorCodes = {
  InvalidJSON: "invalid_json", // 400
  InvalidRequest: "invalid_request", // 400
  BadRequest: "bad_request", // 400
  ConfirmationRequired: "confirmation_required", // 400
  LeaseRequired: "lease_required", // 400
  FilterNeedsIndex: "filter_needs_index", // 400
  Unauthorized: "unauthorized", // 401
  ClusterSecretRequired: "cluster_secret_required", // 401
  PeerCertificateRequired: "peer_certificate_required", // 401
  Forbidden: "forbidden", // 403
  ClusterSecretInvalid: "cluster_secret_invalid", // 403
  CrossOrigin: "cross_origin", // 403
  NotFound: "not_found", // 404
  MethodNotAllowed: "method_not_allowed", // 405
  Conflict: "conflict", // 409
  RemoveFailed: "remove_failed", // 409
  WrongNode: "wrong_node", // 409
  PayloadTooLarge: "payload_too_large", // 413
  BatchTooLarge: "batch_too_large", // 413
  BulkTooLarge: "bulk_too_large", // 413
  UnsupportedMediaType: "unsupported_media_type", // 415
  ResultSchemaInvalid: "result_schema_invalid", // 422
  HeadersTooLarge: "headers_too_large", // 431
  Overloaded: "overloaded", // 429
  RateLimited: "rate_limited", // 429
  BudgetExceeded: "budget_exceeded", // 429, never retried
  BulkBusy: "bulk_busy", // 429
  ReadsBusy: "reads_busy", // 429
  Internal: "internal", // 500
  JoinFailed: "join_failed", // 500, 503
  Unavailable: "unavailable", // 503
  ShuttingDown: "shutting_down", // 503
  InsufficientStorage: "insufficient_storage", // 507
} as const;

/** One of ErrorCodes' values (or a code a newer server added). */
export type ErrorCode = (typeof ErrorCodes)[keyof typeof ErrorCodes] | (string & {});

/** An error answer of the server. `instanceof` a subclass tells the status. */
export class CorvoError extends Error {
  /** The HTTP status. */
  readonly status: number;
  /** The server's stable code (ErrorCodes); "" when the body had none. */
  readonly code: ErrorCode;
  /** The server's Retry-After hint in milliseconds (429, 503), 0 if none. */
  readonly retryAfterMs: number;
  /** The answer's parsed body (a 400 confirmation_required has `would_affect`). */
  readonly body: unknown;

  constructor(status: number, code: string, message: string, retryAfterMs = 0, body?: unknown) {
    super(`corvo: ${status} ${code}: ${message}`);
    this.name = new.target.name;
    this.status = status;
    this.code = code;
    this.retryAfterMs = retryAfterMs;
    this.body = body;
  }

  /** Builds the error for an answer: the subclass of its status. */
  static from(status: number, text: string, retryAfterMs: number): CorvoError {
    let body: unknown;
    let code = "";
    let message = text.trim();
    try {
      body = JSON.parse(text);
      if (body && typeof body === "object") {
        const b = body as { error?: unknown; code?: unknown };
        if (typeof b.code === "string") code = b.code;
        if (typeof b.error === "string") message = b.error;
      }
    } catch {
      body = undefined;
    }
    const Cls = byStatus[status] ?? CorvoError;
    return new Cls(status, code, message, retryAfterMs, body);
  }
}

/** 400: a malformed or invalid request (invalid_json, invalid_request, confirmation_required, lease_required …). */
export class BadRequestError extends CorvoError {}
/** 401: no valid API key (unauthorized). */
export class UnauthorizedError extends CorvoError {}
/** 403: the key may not do this (forbidden). */
export class ForbiddenError extends CorvoError {}
/** 404: unknown job, batch, bulk operation, schedule or endpoint (not_found). */
export class NotFoundError extends CorvoError {}
/** 409: the job is not in a state that allows the call; for a worker, it no longer holds the job (conflict). */
export class ConflictError extends CorvoError {}
/** 413: a payload, batch or bulk operation over the server's limits. */
export class PayloadTooLargeError extends CorvoError {}
/** 429: overloaded, rate_limited or bulk_busy; retried by the client after Retry-After. */
export class TooManyRequestsError extends CorvoError {}
/** 503: unavailable or shutting_down; retried by the client after Retry-After. */
export class UnavailableError extends CorvoError {}

const byStatus: Record<number, typeof CorvoError> = {
  400: BadRequestError,
  401: UnauthorizedError,
  403: ForbiddenError,
  404: NotFoundError,
  409: ConflictError,
  413: PayloadTooLargeError,
  429: TooManyRequestsError,
  503: UnavailableError,
};

/** Whether err is a 404 answer. */
export function isNotFound(err: unknown): err is NotFoundError {
  return err instanceof CorvoError && err.status === 404;
}

/** Whether err is a 409 answer (for a worker: it no longer holds the job). */
export function isConflict(err: unknown): err is ConflictError {
  return err instanceof CorvoError && err.status === 409;
}

/** The reason of a job's AbortSignal when the server cancelled the job. */
export class JobCancelledError extends Error {
  constructor() {
    super("corvo: job cancelled");
    this.name = "JobCancelledError";
  }
}

/** The reason of a job's AbortSignal when another worker or attempt now holds its lease. */
export class LeaseLostError extends Error {
  constructor() {
    super("corvo: job lease lost");
    this.name = "LeaseLostError";
  }
}

/** The reason of a job's AbortSignal when the worker's drain ran out of grace time. */
export class WorkerShutdownError extends Error {
  constructor() {
    super("corvo: worker shutting down");
    this.name = "WorkerShutdownError";
  }
}

/**
 * The reason of a job's AbortSignal when a heartbeat said the job's cost
 * (all its attempts) is past a per-job budget (unless the worker's
 * continueOverBudget); a handler that stops with it fails the attempt
 * with this message.
 */
export class BudgetExceededError extends Error {
  constructor() {
    super("corvo: job budget exceeded");
    this.name = "BudgetExceededError";
  }
}

/**
 * A failure of the model's provider (an outage, a 5xx, a rate limit), not
 * of the job: a handler that throws it fails the attempt with
 * `provider_error: true`, so a job with routing moves to its next model
 * (`job.routing.target`) at once, without counting against its retries.
 */
export class ProviderError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "ProviderError";
  }
}
