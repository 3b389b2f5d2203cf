"""Placement routing, as the Go SDK's (``sdk/go/placement.go``) and the
TypeScript SDK's (``sdk/typescript/src/placement.ts``).

A cluster places each shard on some of its nodes; a node that does not host
a request's shard forwards it (one more hop). The client reads the
placement (``GET /api/v1/cluster/status``: the shard count, each shard's
leader and placed nodes, each node's address) and sends every request that
names one queue or one job straight to a node hosting its shard: the leader
first, then the shard's other nodes, then the client's usual node list
(failover). A queue's shard is xxhash64(stored name) mod the shard count, as
the server's router computes it; a job ID carries its shard
(``job_<shard>_<ULID>``).

The placement is read once, lazily, in the background (the first routed
request goes the usual way), or at once by :meth:`corvo.Client.discover`,
and again (at most every :data:`PLACEMENT_REFRESH` seconds) when an answer
says it was forwarded (:data:`FORWARDED_HEADER`), a node hosting the shard
cannot be reached, or a routed request is answered 503. A cluster of one
node, a key without ``cluster:read`` (403) or a server without the route
turn routing off.
"""

from __future__ import annotations

import re
import struct
import threading
from typing import Any, Dict, List, Mapping, Optional

__all__ = [
    "FORWARDED_HEADER",
    "PLACEMENT_REFRESH",
    "DOWN_FOR",
    "xxhash64",
    "shard_for_queue",
    "stored_queue",
    "shard_of_job_id",
    "Placement",
    "plan_placement",
]

FORWARDED_HEADER = "X-Corvo-Forwarded"
"""Marks a request one node forwarded to another, and the answer to it."""

PLACEMENT_REFRESH = 2.0
"""The least time between two reads of the placement, in seconds."""

PLACEMENT_TIMEOUT = 10.0
"""Bounds one read of the placement, in seconds."""

DOWN_FOR = 5.0
"""How long a node that could not be reached is left out of routing, in seconds."""

_M64 = (1 << 64) - 1
_P1 = 11400714785074694791
_P2 = 14029467366897019727
_P3 = 1609587929392839161
_P4 = 9650029242287828579
_P5 = 2870177450012600261


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M64


def _round(acc: int, lane: int) -> int:
    acc = (acc + lane * _P2) & _M64
    return (_rotl(acc, 31) * _P1) & _M64


def _merge_round(acc: int, val: int) -> int:
    return ((acc ^ _round(0, val)) * _P1 + _P4) & _M64


def xxhash64(data: "str | bytes") -> int:
    """XXH64 with seed 0 of a string's UTF-8 bytes (``github.com/cespare/xxhash/v2``'s ``Sum64String``)."""
    b = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    n = len(b)
    i = 0
    if n >= 32:
        v1 = (_P1 + _P2) & _M64
        v2 = _P2
        v3 = 0
        v4 = (-_P1) & _M64
        while i + 32 <= n:
            l1, l2, l3, l4 = struct.unpack_from("<4Q", b, i)
            v1 = _round(v1, l1)
            v2 = _round(v2, l2)
            v3 = _round(v3, l3)
            v4 = _round(v4, l4)
            i += 32
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M64
        h = _merge_round(h, v1)
        h = _merge_round(h, v2)
        h = _merge_round(h, v3)
        h = _merge_round(h, v4)
    else:
        h = _P5
    h = (h + n) & _M64
    while i + 8 <= n:
        (lane,) = struct.unpack_from("<Q", b, i)
        h ^= _round(0, lane)
        h = (_rotl(h, 27) * _P1 + _P4) & _M64
        i += 8
    if i + 4 <= n:
        (lane,) = struct.unpack_from("<I", b, i)
        h ^= (lane * _P1) & _M64
        h = (_rotl(h, 23) * _P2 + _P3) & _M64
        i += 4
    while i < n:
        h ^= (b[i] * _P5) & _M64
        h = (_rotl(h, 11) * _P1) & _M64
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _M64
    h ^= h >> 29
    h = (h * _P3) & _M64
    h ^= h >> 32
    return h


# Queue names repeat: their hashes are kept (up to _HASH_CACHE_SIZE).
_hash_cache: Dict[str, int] = {}
_HASH_CACHE_SIZE = 4096
_hash_lock = threading.Lock()


def shard_for_queue(stored: str, shards: int) -> int:
    """The server's queue → shard rule (``router.ShardForQueue``) over a stored
    queue name (a non-default namespace's queue ``q`` is stored as ``ns/q``,
    see :func:`stored_queue`): the shard index, from 0."""
    h = _hash_cache.get(stored)
    if h is None:
        h = xxhash64(stored)
        with _hash_lock:
            if len(_hash_cache) >= _HASH_CACHE_SIZE:
                _hash_cache.clear()
            _hash_cache[stored] = h
    return h % shards


def stored_queue(ns: Optional[str], q: str) -> str:
    """The name the server stores queue ``q`` under for namespace ``ns`` (``router.NamespacedQueue``)."""
    return q if not ns or ns == "default" else ns + "/" + q


_JOB_SHARD = re.compile(r"job_(\d+)_")


def shard_of_job_id(job_id: str) -> int:
    """The shard index a job ID carries (``job_<shard>_<ULID>``); -1 when it carries none."""
    m = _JOB_SHARD.match(job_id)
    return int(m.group(1)) if m else -1


class Placement:
    """One reading of the cluster's placement.

    Attributes:
        ns: the namespace the client's requests act in.
        hosts: shard → base URLs of its nodes that are up, leader first.
    """

    __slots__ = ("ns", "hosts")

    def __init__(self, ns: str, hosts: List[List[str]]):
        self.ns = ns
        self.hosts = hosts

    def __repr__(self) -> str:
        return "Placement(ns=%r, hosts=%r)" % (self.ns, self.hosts)


def plan_placement(status: Mapping[str, Any], scheme: str, ns: str) -> Optional[Placement]:
    """A cluster status (``GET /api/v1/cluster/status``) as a placement: for
    each shard, its leader, then its other placed nodes, among the nodes that
    are up. None when there is nothing to route (a single node, no shards)."""
    count = status.get("shard_count") or 0
    nodes = status.get("nodes") or []
    if not isinstance(count, int) or count <= 0 or len(nodes) < 2:
        return None
    addr: Dict[Any, str] = {}
    for n in nodes:
        if n.get("http_address") and n.get("status") in (None, "", "up"):
            addr[n.get("node_id")] = scheme + n["http_address"]
    hosts: List[List[str]] = [[] for _ in range(count)]
    for sh in status.get("shards") or []:
        i = sh.get("shard_id")  # numbered from 0, as in job IDs
        if not isinstance(i, int) or not 0 <= i < count:
            continue
        leader = sh.get("leader_node")
        if leader in addr:
            hosts[i].append(addr[leader])
        for n in sh.get("placed_nodes") or []:
            if n in addr and n != leader:
                hosts[i].append(addr[n])
    return Placement(ns, hosts)
