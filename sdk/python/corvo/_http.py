"""The HTTP transport: stdlib ``http.client`` connections kept alive and
reused across calls and threads (a small pool per base URL), and a reader of
Server-Sent Events.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
from typing import Any, Dict, Iterator, List, Optional, Tuple
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


class _Conn:
    """One kept-alive HTTP/1.1 connection: a request goes out in one write,
    and the answer's status line and headers are read without the email
    parser http.client uses (the most of its cost per request)."""

    __slots__ = ("sock", "rfile", "timeout")

    def __init__(self, sock: socket.socket, timeout: Optional[float]):
        self.sock = sock
        self.rfile = sock.makefile("rb")
        self.timeout = timeout

    def close(self) -> None:
        try:
            self.rfile.close()
        finally:
            self.sock.close()


def dial_failed(err: BaseException) -> bool:
    """True for an error of a request that never reached a server (nothing
    listens, no route, the TLS handshake failed): sending it elsewhere
    cannot apply it twice."""
    return bool(getattr(err, "corvo_dial", False))


class Cancelled(Exception):
    """A request ended by :meth:`Cancel.cancel` (its connection shut down)."""


class Cancel:
    """A cancellation handle for a request in flight (a long-poll fetch):
    :meth:`cancel`, from any thread, shuts down the request's connection, so
    the server sees the client go and the blocked call raises
    :class:`Cancelled` (as does a retry's wait, and any request started
    afterwards with this handle)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: Optional[socket.socket] = None
        self._event = threading.Event()

    @property
    def cancelled(self) -> bool:
        """True once :meth:`cancel` was called."""
        return self._event.is_set()

    def cancel(self) -> None:
        """Ends the request in flight (if any) and every later one."""
        with self._lock:
            self._event.set()
            sock = self._sock
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _attach(self, sock: socket.socket) -> None:
        with self._lock:
            if self._event.is_set():
                raise Cancelled("corvo: cancelled")
            self._sock = sock

    def _detach(self) -> None:
        with self._lock:
            self._sock = None


class Transport:
    """Opens, reuses and closes connections to the client's base URLs."""

    def __init__(self, ssl_context: Optional[ssl.SSLContext] = None):
        self._ssl = ssl_context
        self._idle: Dict[str, List[_Conn]] = {}
        self._lock = threading.Lock()

    def connect(self, base: Base, timeout: Optional[float]) -> http.client.HTTPConnection:
        """A new http.client connection (for streams; not pooled)."""
        if base.https:
            return http.client.HTTPSConnection(base.host, base.port, timeout=timeout, context=self._context())
        return http.client.HTTPConnection(base.host, base.port, timeout=timeout)

    def _context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context()
        return self._ssl

    def _dial(self, base: Base, timeout: Optional[float]) -> _Conn:
        try:
            sock = socket.create_connection((base.host, base.port), timeout)
        except OSError as err:
            err.corvo_dial = True  # type: ignore[attr-defined]  # see dial_failed
            raise
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if base.https:
                sock = self._context().wrap_socket(sock, server_hostname=base.host)
        except OSError as err:
            sock.close()
            err.corvo_dial = True  # type: ignore[attr-defined]
            raise
        except BaseException:
            sock.close()
            raise
        return _Conn(sock, timeout)

    def _take(self, base: Base) -> Optional[_Conn]:
        with self._lock:
            idle = self._idle.get(base.url)
            if idle:
                return idle.pop()
        return None

    def _give(self, base: Base, conn: _Conn) -> None:
        with self._lock:
            idle = self._idle.setdefault(base.url, [])
            if len(idle) < MAX_IDLE:
                idle.append(conn)
                return
        conn.close()

    def request(
        self,
        base: Base,
        method: str,
        path: str,
        body: Optional[bytes],
        headers: Dict[str, str],
        timeout: Optional[float],
        cancel: Optional[Cancel] = None,
    ) -> Answer:
        """Sends one request and reads its whole answer. A pooled connection
        the server closed while idle is replaced and the request sent again;
        any other transport error is raised (OSError, http.client errors;
        :func:`dial_failed` tells those of a connection that never opened).
        ``cancel`` ends the request from another thread (:class:`Cancelled`)."""
        head = "%s %s%s HTTP/1.1\r\nHost: %s:%d\r\n" % (method, base.prefix, path, base.host, base.port)
        for k, v in headers.items():
            head += k + ": " + v + "\r\n"
        if body is not None or method in ("POST", "PUT", "PATCH"):
            head += "Content-Length: %d\r\n" % (len(body) if body else 0)
        msg = (head + "\r\n").encode("latin-1")
        if body:
            msg += body
        if cancel is not None and cancel.cancelled:
            raise Cancelled("corvo: cancelled")
        conn = self._take(base)
        reused = conn is not None
        while True:
            if conn is None:
                conn = self._dial(base, timeout)
            elif conn.timeout != timeout:
                conn.sock.settimeout(timeout)
                conn.timeout = timeout
            try:
                if cancel is not None:
                    cancel._attach(conn.sock)
                try:
                    conn.sock.sendall(msg)
                    a, keep = _read_answer(conn.rfile, method)
                finally:
                    if cancel is not None:
                        cancel._detach()
            except _STALE:
                conn.close()
                if cancel is not None and cancel.cancelled:
                    raise Cancelled("corvo: cancelled") from None
                if not reused:
                    raise
                conn, reused = None, False
                continue
            except BaseException as err:
                conn.close()
                if cancel is not None and cancel.cancelled and not isinstance(err, Cancelled):
                    raise Cancelled("corvo: cancelled") from err
                raise
            if keep and not (cancel is not None and cancel.cancelled):
                self._give(base, conn)
            else:
                conn.close()  # a cancel may have shut it down
            return a

    def close(self) -> None:
        """Closes every idle connection."""
        with self._lock:
            conns = [c for idle in self._idle.values() for c in idle]
            self._idle.clear()
        for c in conns:
            c.close()


_MAX_LINE = 65536


def _read_answer(f: Any, method: str) -> Tuple[Answer, bool]:
    """Reads an HTTP/1.1 answer: (the answer, whether the connection stays open)."""
    while True:
        line = f.readline(_MAX_LINE + 1)
        if not line:
            raise http.client.RemoteDisconnected("the server closed the connection without an answer")
        parts = line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
            raise http.client.BadStatusLine(line.decode("latin-1", "replace"))
        status = int(parts[1])
        headers: Dict[str, str] = {}
        while True:
            h = f.readline(_MAX_LINE + 1)
            if h in (b"\r\n", b"\n", b""):
                break
            k, _, v = h.partition(b":")
            headers[k.strip().lower().decode("latin-1")] = v.strip().decode("latin-1")
        if status >= 200:
            break  # a 1xx interim answer is followed by the real one
    keep = parts[0] != b"HTTP/1.0" and headers.get("connection", "").lower() != "close"
    if status in (204, 304) or method == "HEAD":
        body = b""
    elif "chunked" in headers.get("transfer-encoding", "").lower():
        chunks = []
        while True:
            size = int(f.readline(_MAX_LINE + 1).split(b";", 1)[0], 16)
            if size == 0:
                while f.readline(_MAX_LINE + 1) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                break
            chunks.append(_read_exact(f, size))
            f.readline(_MAX_LINE + 1)
        body = b"".join(chunks)
    elif "content-length" in headers:
        body = _read_exact(f, int(headers["content-length"]))
    else:
        body = f.read()
        keep = False
    return Answer(status, headers, body), keep


def _read_exact(f: Any, n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise http.client.IncompleteRead(data, n - len(data))
    return data


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
