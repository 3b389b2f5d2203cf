"""The HTTP transport: stdlib ``http.client`` connections kept alive and
reused across calls and threads (a small pool per base URL), and a reader of
Server-Sent Events.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
from typing import Dict, Iterator, List, Optional, Tuple
from urllib.parse import urlsplit

# Idle connections kept per base URL; more are opened when more requests
# run at once, and closed when they come back to a full pool.
MAX_IDLE = 64

# The errors a kept-alive connection the server closed while idle raises on
# its next request (nothing of that request reached the server).
_STALE = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError, ConnectionAbortedError)


class Base:
    """A parsed base URL."""

    __slots__ = ("url", "https", "host", "port", "prefix")

    def __init__(self, url: str):
        u = urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError("corvo: not an http(s) URL: %r" % url)
        self.url = url
        self.https = u.scheme == "https"
        self.host = u.hostname
        self.port = u.port or (443 if self.https else 80)
        self.prefix = u.path.rstrip("/")


class Answer:
    """A whole answer: status, headers (lower-case names), body bytes."""

    __slots__ = ("status", "headers", "body")

    def __init__(self, status: int, headers: Dict[str, str], body: bytes):
        self.status = status
        self.headers = headers
        self.body = body


class Transport:
    """Opens, reuses and closes connections to the client's base URLs."""

    def __init__(self, ssl_context: Optional[ssl.SSLContext] = None):
        self._ssl = ssl_context
        self._idle: Dict[str, List[http.client.HTTPConnection]] = {}
        self._lock = threading.Lock()

    def connect(self, base: Base, timeout: Optional[float]) -> http.client.HTTPConnection:
        """A new connection (not from the pool)."""
        if base.https:
            ctx = self._ssl or ssl.create_default_context()
            return http.client.HTTPSConnection(base.host, base.port, timeout=timeout, context=ctx)
        return http.client.HTTPConnection(base.host, base.port, timeout=timeout)

    def _take(self, base: Base) -> Optional[http.client.HTTPConnection]:
        with self._lock:
            idle = self._idle.get(base.url)
            if idle:
                return idle.pop()
        return None

    def _give(self, base: Base, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            idle = self._idle.setdefault(base.url, [])
            if len(idle) < MAX_IDLE:
                idle.append(conn)
                return
        conn.close()

    def request(
        self, base: Base, method: str, path: str, body: Optional[bytes], headers: Dict[str, str], timeout: Optional[float]
    ) -> Answer:
        """Sends one request and reads its whole answer. A pooled connection
        the server closed while idle is replaced and the request sent again;
        any other transport error is raised (OSError, http.client errors)."""
        conn = self._take(base)
        reused = conn is not None
        while True:
            if conn is None:
                conn = self.connect(base, timeout)
            else:
                conn.timeout = timeout
                if conn.sock is not None:
                    conn.sock.settimeout(timeout)
            try:
                conn.request(method, base.prefix + path, body, headers)
                resp = conn.getresponse()
                data = resp.read()
            except _STALE:
                conn.close()
                if not reused:
                    raise
                conn, reused = None, False
                continue
            except BaseException:
                conn.close()
                raise
            hdrs = {k.lower(): v for k, v in resp.getheaders()}
            if resp.will_close:
                conn.close()
            else:
                self._give(base, conn)
            return Answer(resp.status, hdrs, data)

    def close(self) -> None:
        """Closes every idle connection."""
        with self._lock:
            conns = [c for idle in self._idle.values() for c in idle]
            self._idle.clear()
        for c in conns:
            c.close()


class Stream:
    """A streaming answer on its own connection (Server-Sent Events, NDJSON).

    ``close()`` may be called from any thread: it ends a read blocked on the
    socket.
    """

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse):
        self.conn = conn
        self.resp = resp
        self._sock = conn.sock
        self.closed = False

    def readline(self) -> bytes:
        if self.closed:
            return b""
        try:
            return self.resp.readline()
        except (OSError, ValueError, http.client.HTTPException):
            if self.closed:
                return b""
            raise

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.conn.close()


def sse_frames(stream: Stream) -> Iterator[Tuple[str, str, str]]:
    """Reads a Server-Sent Events answer frame by frame: (id, event, data)."""
    fid, event, data = "", "", ""
    has_data = False
    while True:
        raw = stream.readline()
        if not raw:
            return
        line = raw.decode("utf-8")
        if line.endswith("\n"):
            line = line[:-1]
        if line.endswith("\r"):
            line = line[:-1]
        if line == "":
            if event or has_data:
                yield fid, event, data
            fid, event, data = "", "", ""
            has_data = False
            continue
        if line.startswith(":"):
            continue  # a comment (keepalive)
        field, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if field == "id":
            fid = value
        elif field == "event":
            event = value
        elif field == "data":
            data = data + "\n" + value if has_data else value
            has_data = True
