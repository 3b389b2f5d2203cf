"""Corvo: the Python client and worker runtime of the Corvo job server.

No dependencies beyond the standard library. Request and answer bodies are
plain dicts carrying the server's JSON fields as they are (docs/api.md),
typed in :mod:`corvo.types`.

>>> from corvo import Client, Worker
>>> client = Client("http://localhost:8080")  # doctest: +SKIP
>>> client.enqueue("emails.send", {"to": "user@example.com"})  # doctest: +SKIP
"""

from .client import Cancel, Cancelled, Client, EventStream
from .errors import (
    BadRequestError,
    BudgetExceeded,
    ConflictError,
    CorvoError,
    ErrorCodes,
    ForbiddenError,
    JobCancelled,
    LeaseLost,
    NotFoundError,
    PayloadTooLargeError,
    ProviderError,
    TooManyRequestsError,
    UnauthorizedError,
    UnavailableError,
    WorkerShutdown,
    is_conflict,
    is_not_found,
)
from .worker import Handler, JobContext, Worker

__version__ = "0.1.0"

__all__ = [
    "Client",
    "EventStream",
    "Cancel",
    "Cancelled",
    "Worker",
    "JobContext",
    "Handler",
    "CorvoError",
    "BadRequestError",
    "UnauthorizedError",
    "ForbiddenError",
    "NotFoundError",
    "ConflictError",
    "PayloadTooLargeError",
    "TooManyRequestsError",
    "UnavailableError",
    "ErrorCodes",
    "is_not_found",
    "is_conflict",
    "JobCancelled",
    "LeaseLost",
    "WorkerShutdown",
    "BudgetExceeded",
    "ProviderError",
]
