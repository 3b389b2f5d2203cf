"""Errors: every error answer of the server is ``{"error", "code"}``.

The client raises it as a :class:`CorvoError` (or the subclass of its HTTP
status) carrying the status, the stable code and the server's Retry-After.
The worker runtime's cancellation reasons (:class:`JobCancelled`,
:class:`LeaseLost`, :class:`WorkerShutdown`) live here too.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional, Type


class ErrorCodes:
    """The stable codes of the server's error answers (docs/api.md, "Errors")."""

    INVALID_JSON = "invalid_json"  # 400
    INVALID_REQUEST = "invalid_request"  # 400
    BAD_REQUEST = "bad_request"  # 400
    CONFIRMATION_REQUIRED = "confirmation_required"  # 400
    LEASE_REQUIRED = "lease_required"  # 400
    FILTER_NEEDS_INDEX = "filter_needs_index"  # 400
    UNAUTHORIZED = "unauthorized"  # 401
    CLUSTER_SECRET_REQUIRED = "cluster_secret_required"  # 401
    PEER_CERTIFICATE_REQUIRED = "peer_certificate_required"  # 401
    FORBIDDEN = "forbidden"  # 403
    CLUSTER_SECRET_INVALID = "cluster_secret_invalid"  # 403
    CROSS_ORIGIN = "cross_origin"  # 403
    NOT_FOUND = "not_found"  # 404
    METHOD_NOT_ALLOWED = "method_not_allowed"  # 405
    CONFLICT = "conflict"  # 409
    REMOVE_FAILED = "remove_failed"  # 409
    WRONG_NODE = "wrong_node"  # 409
    PAYLOAD_TOO_LARGE = "payload_too_large"  # 413
    BATCH_TOO_LARGE = "batch_too_large"  # 413
    BULK_TOO_LARGE = "bulk_too_large"  # 413
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"  # 415
    RESULT_SCHEMA_INVALID = "result_schema_invalid"  # 422
    HEADERS_TOO_LARGE = "headers_too_large"  # 431
    OVERLOADED = "overloaded"  # 429
    RATE_LIMITED = "rate_limited"  # 429
    BUDGET_EXCEEDED = "budget_exceeded"  # 429, never retried
    BULK_BUSY = "bulk_busy"  # 429
    READS_BUSY = "reads_busy"  # 429
    INTERNAL = "internal"  # 500
    JOIN_FAILED = "join_failed"  # 500, 503
    UNAVAILABLE = "unavailable"  # 503
    SHUTTING_DOWN = "shutting_down"  # 503
    INSUFFICIENT_STORAGE = "insufficient_storage"  # 507

    @classmethod
    def all(cls) -> list:
        """Every code, as the server writes it."""
        return [v for k, v in vars(cls).items() if k.isupper() and isinstance(v, str)]


class CorvoError(Exception):
    """An error answer of the server. ``isinstance`` of a subclass tells the status.

    Attributes:
        status: the HTTP status.
        code: the server's stable code (:class:`ErrorCodes`); ``""`` when the body had none.
        message: the server's human message.
        retry_after: the server's Retry-After hint in seconds (429, 503), 0 if none.
        body: the answer's parsed body (a 400 ``confirmation_required`` has ``would_affect``;
            a partial batch enqueue has ``job_ids`` and ``not_applied``), or None.
    """

    def __init__(self, status: int, code: str, message: str, retry_after: float = 0.0, body: Any = None):
        super().__init__("corvo: %d %s: %s" % (status, code, message))
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after
        self.body = body

    @staticmethod
    def from_answer(status: int, text: str, retry_after: float = 0.0) -> "CorvoError":
        """Builds the error for an answer: the subclass of its status."""
        body: Any = None
        code = ""
        message = text.strip()
        try:
            body = json.loads(text)
        except ValueError:
            body = None
        if isinstance(body, dict):
            if isinstance(body.get("code"), str):
                code = body["code"]
            if isinstance(body.get("error"), str):
                message = body["error"]
        cls = _BY_STATUS.get(status, CorvoError)
        return cls(status, code, message, retry_after, body)


class BadRequestError(CorvoError):
    """400: a malformed or invalid request (invalid_json, invalid_request, confirmation_required, lease_required …)."""


class UnauthorizedError(CorvoError):
    """401: no valid API key (unauthorized)."""


class ForbiddenError(CorvoError):
    """403: the key may not do this (forbidden)."""


class NotFoundError(CorvoError):
    """404: unknown job, batch, bulk operation, schedule or endpoint (not_found)."""


class ConflictError(CorvoError):
    """409: the job is not in a state that allows the call; for a worker, it no longer holds the job."""


class PayloadTooLargeError(CorvoError):
    """413: a payload, batch or bulk operation over the server's limits."""


class TooManyRequestsError(CorvoError):
    """429: overloaded, rate_limited, bulk_busy or reads_busy; retried by the client after Retry-After."""


class UnavailableError(CorvoError):
    """503: unavailable or shutting_down; retried by the client after Retry-After."""


_BY_STATUS: Dict[int, Type[CorvoError]] = {
    400: BadRequestError,
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    429: TooManyRequestsError,
    503: UnavailableError,
}


def is_not_found(err: Optional[BaseException]) -> bool:
    """Whether err is a 404 answer."""
    return isinstance(err, CorvoError) and err.status == 404


def is_conflict(err: Optional[BaseException]) -> bool:
    """Whether err is a 409 answer (for a worker: it no longer holds the job)."""
    return isinstance(err, CorvoError) and err.status == 409


class JobCancelled(Exception):
    """A job's cancellation reason when the server cancelled the job."""

    def __init__(self) -> None:
        super().__init__("corvo: job cancelled")


class LeaseLost(Exception):
    """A job's cancellation reason when another worker or attempt now holds its lease."""

    def __init__(self) -> None:
        super().__init__("corvo: job lease lost")


class WorkerShutdown(Exception):
    """A job's cancellation reason when the worker's drain ran out of grace time."""

    def __init__(self) -> None:
        super().__init__("corvo: worker shutting down")


class BudgetExceeded(Exception):
    """A job's cancellation reason when a heartbeat said its cost (all its
    attempts) is past a per-job budget (unless the worker's
    ``continue_over_budget``); a handler that stops with it
    (``ctx.raise_if_cancelled()``) fails the attempt with this message."""

    def __init__(self) -> None:
        super().__init__("corvo: job budget exceeded")


class ProviderError(Exception):
    """A failure of the model's provider (an outage, a 5xx, a rate limit), not
    of the job: a handler that raises it fails the attempt with
    ``provider_error: true``, so a job with routing moves to its next model
    (``job["routing"]["target"]``) at once, without using a retry."""
