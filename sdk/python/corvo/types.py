"""The bodies of the server's requests and answers, field for field as they
travel (snake_case, as docs/api.md writes them). They are plain ``dict``s at
run time; these ``TypedDict``s give them types. Timestamps are RFC 3339
strings; durations are strings (``"5s"``, ``"10m"``).
"""

from __future__ import annotations

from typing import Any, Dict, List, Literal, Optional, TypedDict, Union

Priority = Union[Literal["critical", "high", "normal"], int]
"""A priority tier (or its number: 0 critical, 1 high, 2 normal)."""

JobState = Literal["scheduled", "pending", "active", "retrying", "completed", "dead", "cancelled", "held"]

HeartbeatStatus = Literal["ok", "cancel", "lost", "not_found"]
"""A job's status in a heartbeat answer."""


class ChainStep(TypedDict, total=False):
    """A step (or handler) of a chain."""

    queue: str
    payload: Any


class Chain(TypedDict, total=False):
    """A sequential pipeline; the job itself is its first step."""

    steps: List[ChainStep]
    on_failure: ChainStep
    on_exit: ChainStep


class EnqueueRequest(TypedDict, total=False):
    """``POST /api/v1/enqueue``: a job and every option (``queue`` is required)."""

    queue: str
    payload: Any
    priority: Priority
    max_retries: int
    retry_backoff: Literal["none", "fixed", "linear", "exponential"]
    retry_base_delay: str
    retry_max_delay: str
    lease_duration: int
    scheduled_at: str
    expire_after: str
    tags: Dict[str, str]
    unique_key: str
    unique_period: int
    depends_on: List[str]
    chain: Chain
    routing: "Routing"


class Routing(TypedDict, total=False):
    """An enqueue's model routing (``prefer`` is required): the models a worker
    may call for the job; fetches carry the one to call now
    (``FetchedJob["routing"]``)."""

    prefer: str
    fallback: List[str]
    strategy: Literal["fallback_on_error", "round_robin", "lowest_cost"]
    prices: Dict[str, float]  # with lowest_cost: a price for every model


class RouteTarget(TypedDict):
    """A fetched job's routing: the model to call for this attempt and its
    place in the job's try order (0: the first)."""

    target: str
    index: int


class Usage(TypedDict, total=False):
    """What a job's LLM calls used, as a worker reports it on an ack, a fail or
    a heartbeat (every member optional). On a heartbeat it is the attempt's
    usage so far (cumulative); on an ack or a fail, what the attempt used
    beyond its heartbeats. The worker works this out: handlers call
    ``ctx.report_usage(...)``."""

    input_tokens: int
    output_tokens: int
    cache_creation_tokens: int
    cache_read_tokens: int
    model: str
    provider: str
    cost_usd: float
    latency_ms: int


class Enqueued(TypedDict):
    """The answer to an enqueue."""

    job_id: str
    status: str
    unique_existing: bool


class BatchEnqueued(TypedDict, total=False):
    """The answer to a batch enqueue."""

    job_ids: List[str]
    batch_id: Optional[str]
    unique_existing: List[bool]
    not_applied: List[int]


class FetchRequest(TypedDict, total=False):
    """``POST /api/v1/fetch`` (and the ``fetch`` of an ack)."""

    queues: List[str]
    worker_id: str
    hostname: str
    timeout: float
    count: int


class _FetchedJobExtra(TypedDict, total=False):
    routing: Optional[RouteTarget]  # the model to call now, for a job enqueued with routing


class FetchedJob(_FetchedJobExtra):
    """A job handed to a worker (``routing`` only for a job enqueued with it)."""

    job_id: str
    queue: str
    payload: Any
    priority: str
    attempt: int
    max_retries: int
    lease_duration: int
    lease_expires_at: Optional[str]
    checkpoint: Any
    tags: Optional[Dict[str, str]]
    created_at: str


class AckItem(TypedDict, total=False):
    """One ack of an ack batch."""

    job_id: str
    result: Any
    step_status: Literal["continue", "exit"]
    worker_id: str
    attempt: int
    usage: Usage  # what the attempt used beyond its heartbeats


class AckFetched(TypedDict, total=False):
    """The answer to an ack that carried a fetch."""

    status: str
    jobs: List[FetchedJob]
    fetch_error: str


class JobFailure(TypedDict):
    """One job a many-job call could not apply."""

    job_id: str
    code: str
    error: str


class AckBatchResult(TypedDict, total=False):
    """The answer to ``POST /api/v1/ack/batch``."""

    acked: int
    errors: List[JobFailure]
    jobs: List[FetchedJob]
    fetch_error: str


class FailResult(TypedDict, total=False):
    """What the server made of a failure."""

    status: Literal["retrying", "dead", "cancelled"]
    next_attempt_at: str
    attempts_remaining: int


class UnclaimResult(TypedDict):
    """The answer to an unclaim: ``cancelled`` when a cancel came while the job was claimed."""

    status: Literal["pending", "cancelled"]


class HeartbeatJob(TypedDict, total=False):
    """A held job's part of a heartbeat."""

    attempt: int
    progress: Any
    checkpoint: Any
    usage: Usage  # the attempt's usage so far (replaces its previous heartbeat report)


class HeartbeatAnswer(TypedDict, total=False):
    """A job's whole heartbeat answer: its status (``ok``, ``cancel``,
    ``lost``, ``not_found``) and whether its cost (all its attempts) is past
    a per-job budget covering it."""

    status: str
    budget_exceeded: bool


class Budget(TypedDict):
    """A budget as ``GET /api/v1/budgets`` lists it, with the spend of the
    current UTC day; a limit not set is None."""

    scope: str  # queue:<name>, tag:<key>=<value> or global
    daily_usd: Optional[float]
    per_job_usd: Optional[float]
    on_exceed: Literal["hold", "reject", "alert_only"]
    day: str
    spent_usd: float
    exceeded: bool


class Job(TypedDict, total=False):
    """The whole job (``GET /api/v1/jobs/{id}``)."""

    id: str
    moved_from: str
    queue: str
    payload: Any
    state: JobState
    priority: str
    attempt: int
    max_retries: int
    attempts_remaining: int
    retry_backoff: str
    retry_base_delay: str
    retry_max_delay: str
    lease_duration: int
    created_at: str
    scheduled_at: Optional[str]
    started_at: Optional[str]
    completed_at: Optional[str]
    failed_at: Optional[str]
    lease_expires_at: Optional[str]
    expire_after: Optional[str]
    expire_at: Optional[str]
    unique_key: Optional[str]
    unique_period: Optional[int]
    batch_id: Optional[str]
    chain_id: Optional[str]
    chain_step: Optional[int]
    chain_config: Any
    depends_on: List[str]
    dependencies_done: int
    tags: Dict[str, str]
    progress: Any
    checkpoint: Any
    result: Any
    cancel_requested: bool
    reason: Optional[str]
    last_error: Optional[str]
    errors: List[Dict[str, Any]]
    worker: Optional[Dict[str, Any]]
    timeline: List[Dict[str, Any]]
    routing: Optional[Dict[str, Any]]  # as enqueued, with order, target, index and fallbacks; None without
    usage: Optional[Dict[str, Any]]  # totals and reports; None until a worker reports usage
    scores: List[Dict[str, Any]]


class SearchFilter(TypedDict, total=False):
    """``POST /api/v1/jobs/search``, and a bulk operation's filter."""

    queue: str
    state: List[JobState]
    priority: Priority
    tags: Dict[str, str]
    payload_contains: str
    payload_jq: str
    created_after: str
    created_before: str
    scheduled_after: str
    scheduled_before: str
    started_after: str
    started_before: str
    completed_after: str
    completed_before: str
    expire_after: str
    expire_before: str
    worker_id: str
    has_errors: bool
    error_contains: str
    batch_id: str
    depends_on: str  # the jobs that wait on this job ID (its children)
    model: str  # jobs with a usage report of this model
    min_cost_usd: float  # jobs whose usage reports add up to at least this cost
    unique_key: str
    attempt_min: int
    attempt_max: int
    job_id_prefix: str
    sort: Literal["created_at", "scheduled_at", "started_at", "completed_at", "priority", "attempt"]
    order: Literal["asc", "desc"]
    cursor: Optional[str]
    limit: int


class SearchPage(TypedDict, total=False):
    """One page of a search."""

    jobs: List[Dict[str, Any]]
    total: int
    cursor: Optional[str]
    has_more: bool
    duration_ms: float
    stale: bool


class BulkResult(TypedDict, total=False):
    """The answer of a bulk operation run at once."""

    affected: int
    errors: int
    failed: List[JobFailure]
    duration_ms: float


class BulkAccepted(TypedDict, total=False):
    """The answer of a bulk operation accepted to run in the background."""

    bulk_operation_id: str
    status: str
    estimated_total: int
    progress_url: str


class BulkAnswer(TypedDict, total=False):
    """What :meth:`corvo.Client.bulk` answers: ``result`` (run at once) or ``accepted`` (in the background)."""

    result: BulkResult
    accepted: BulkAccepted


class BulkOperation(TypedDict, total=False):
    """A background bulk operation's record."""

    id: str
    action: str
    status: Literal["processing", "completed", "cancelled", "failed", "interrupted"]
    namespace: str
    total: int
    processed: int
    affected: int
    errors: int
    created_at: str
    finished_at: str
    duration_ms: float
    error: str
    failed: List[JobFailure]


class Schedule(TypedDict, total=False):
    """A cron schedule (``id``, ``next_run``, ``last_run``, ``last_job_id``, ``paused``, ``created_at`` are answered, not sent)."""

    id: str
    name: str
    queue: str
    cron: str
    timezone: str
    payload: Any
    unique_key: str
    max_retries: int
    priority: Priority
    next_run: Optional[str]
    last_run: Optional[str]
    last_job_id: Optional[str]
    paused: bool
    created_at: str


class Event(TypedDict, total=False):
    """A frame of the event stream: ``type`` "job" (with ``job``, the job event) or "reset" (with ``reason``: refetch state)."""

    id: str
    type: Literal["job", "reset"]
    job: Dict[str, Any]
    reason: str
