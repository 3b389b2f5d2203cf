"""Test helpers: a real corvo server on a free 127.0.0.1 port and a fresh
data dir, killed when the tests end; polling helpers."""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request
from typing import Any, Callable, Dict, List, Optional

PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_ROOT = os.path.dirname(os.path.dirname(PKG_DIR))

if PKG_DIR not in sys.path:
    sys.path.insert(0, PKG_DIR)

_built: Optional[str] = None


def server_binary() -> str:
    """The server binary: $CORVO_BIN, else this repository's, built once per test process."""
    global _built
    env = os.environ.get("CORVO_BIN")
    if env:
        return env
    if _built is None:
        d = tempfile.mkdtemp(prefix="corvo-py-bin-")
        atexit.register(shutil.rmtree, d, True)
        out = os.path.join(d, "corvo")
        subprocess.run(["go", "build", "-o", out, "./cmd/corvo"], cwd=REPO_ROOT, check=True)
        _built = out
    return _built


def free_addr() -> str:
    """A free TCP address on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return "127.0.0.1:%d" % s.getsockname()[1]


# The cluster secret of test clusters: the nodes of one share it.
TEST_CLUSTER_SECRET = "sdk-test-cluster-secret-0123456789abcdef"


class Server:
    """A corvo server process; stop() kills it and removes its data dir."""

    def __init__(self, args: List[str], env: Optional[Dict[str, str]] = None):
        self.bin = server_binary()
        http = free_addr()
        raft = free_addr()
        self.data = tempfile.mkdtemp(prefix="corvo-py-data-")
        self.url = "http://" + http
        self.proc = subprocess.Popen(
            [self.bin, "server", "--bind", http, "--raft-bind", raft, "--data-dir", self.data, "--log-level", "error"] + args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            env=dict(os.environ, **env) if env else None,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.02)
        self.stop()
        raise RuntimeError("the corvo server did not start")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.data, ignore_errors=True)


class ServerCase(unittest.TestCase):
    """A test case whose tests share one server, started for the class with
    SERVER_ARGS and stopped after it."""

    SERVER_ARGS: List[str] = []
    server: Server

    @classmethod
    def setUpClass(cls) -> None:
        cls.server = Server(cls.SERVER_ARGS)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.server.stop()


def until(what: str, fn: Callable[[], Any], timeout: float = 20.0) -> Any:
    """Polls until fn() answers something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.02)


def wait_state(client: Any, job_id: str, state: str) -> Any:
    """Waits until the job is in state; answers the job."""

    def check() -> Any:
        j = client.job(job_id)
        return j if j["state"] == state else None

    return until("job %s to be %s" % (job_id, state), check)
