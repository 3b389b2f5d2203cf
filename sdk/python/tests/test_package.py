"""The package as a user gets it: it imports with the standard library
alone; the README quick starts and examples/worker-py run verbatim against
a real server; a worker killed with SIGTERM mid-job loses nothing and the
leftover job comes back with its checkpoint."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import unittest
from typing import Any, Dict, List, Optional

from _server import PKG_DIR, REPO_ROOT, ServerCase, until, wait_state

from corvo import Client

EXAMPLES = os.path.join(REPO_ROOT, "examples", "worker-py")


class Proc:
    """A Python script run in a subprocess, its output gathered."""

    def __init__(self, script: str, env: Dict[str, str], cwd: str):
        e = dict(os.environ, PYTHONPATH=PKG_DIR, PYTHONUNBUFFERED="1", **env)
        self.p = subprocess.Popen([sys.executable, script], cwd=cwd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.out: List[str] = []
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self) -> None:
        assert self.p.stdout is not None
        for line in self.p.stdout:
            self.out.append(line.decode("utf-8", "replace"))

    def text(self) -> str:
        return "".join(self.out)

    def wait(self, timeout: float = 60) -> int:
        code = self.p.wait(timeout)
        self._t.join(5)
        return code

    def kill(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()
        self._t.join(5)
        if self.p.stdout is not None:
            self.p.stdout.close()


def quickstart(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    at = text.find("<!-- quickstart:python -->")
    if at < 0:
        raise AssertionError("%s has no Python quick start" % path)
    start = text.index("```python\n", at) + len("```python\n")
    return text[start : text.index("```", start)]


class TestPackage(ServerCase):

    def setUp(self) -> None:
        self.tmp = tempfile.mkdtemp(prefix="corvo-py-pkg-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.c = Client(self.server.url)
        self.addCleanup(self.c.close)

    def run_script(self, name: str, code: str, env: Optional[Dict[str, str]] = None) -> Proc:
        path = os.path.join(self.tmp, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(code)
        p = Proc(path, dict(env or {}, CORVO_URL=self.server.url), self.tmp)
        self.addCleanup(p.kill)
        return p

    def test_the_package_needs_nothing_but_the_standard_library(self) -> None:
        # A copy of the package alone, imported by an isolated interpreter
        # (no site-packages, no PYTHONPATH): every import it makes resolves.
        shutil.copytree(os.path.join(PKG_DIR, "corvo"), os.path.join(self.tmp, "corvo"))
        code = (
            "import sys\nsys.path.insert(0, '.')\nimport corvo, corvo.client, corvo.worker, corvo.errors, corvo.types, corvo.placement\n"
            "std = getattr(sys, 'stdlib_module_names', None)  # 3.10+; before, the isolated import is the check\n"
            "mods = [m for m in sys.modules if std is not None and m.split('.')[0] not in std and m.split('.')[0] not in ('corvo', '__main__')]\n"
            "print(sorted(mods))\n"
        )
        out = subprocess.run([sys.executable, "-I", "-S", "-c", code], cwd=self.tmp, capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.strip(), "[]", "modules from outside the standard library")
        self.assertTrue(os.path.exists(os.path.join(PKG_DIR, "corvo", "py.typed")))
        with open(os.path.join(PKG_DIR, "pyproject.toml"), encoding="utf-8") as f:
            pyproject = f.read()
        self.assertRegex(pyproject, r'(?m)^dependencies = \[\]$')
        self.assertRegex(pyproject, r'(?m)^requires-python = ">=3.9"$')
        self.assertRegex(pyproject, r'(?m)^name = "corvo"$')

    def check_quickstart(self, readme: str) -> None:
        p = self.run_script("quickstart.py", quickstart(readme))
        m = until("the quick start's job id", lambda: re.search(r"enqueued (job_\S+)", p.text()))
        job = wait_state(self.c, m.group(1), "completed")
        self.assertEqual(job["result"], {"sent": True})
        p.p.send_signal(signal.SIGTERM)
        self.assertEqual(p.wait(), 0, p.text())

    def test_the_readme_quick_start_runs_verbatim(self) -> None:
        self.check_quickstart(os.path.join(REPO_ROOT, "README.md"))

    def test_the_sdk_readme_quick_start_runs_verbatim(self) -> None:
        self.assertEqual(quickstart(os.path.join(PKG_DIR, "README.md")), quickstart(os.path.join(REPO_ROOT, "README.md")))
        self.check_quickstart(os.path.join(PKG_DIR, "README.md"))

    def test_examples_producer_and_worker(self) -> None:
        q = "py.examples"
        prod = Proc(os.path.join(EXAMPLES, "producer.py"), {"CORVO_URL": self.server.url, "CORVO_QUEUE": q, "CORVO_JOBS": "12"}, EXAMPLES)
        self.addCleanup(prod.kill)
        self.assertEqual(prod.wait(), 0, prod.text())
        ids = re.findall(r"enqueued (job_\S+)", prod.text())
        self.assertEqual(len(ids), 13, prod.text())
        w = Proc(os.path.join(EXAMPLES, "worker.py"), {"CORVO_URL": self.server.url, "CORVO_QUEUES": q}, EXAMPLES)
        self.addCleanup(w.kill)
        for i, jid in enumerate(ids[:12]):
            self.assertEqual(wait_state(self.c, jid, "completed")["result"], {"processed": 40 + i})
        dead = wait_state(self.c, ids[12], "dead")
        self.assertEqual([e["error"] for e in dead["errors"]], ["report source unavailable"] * 2)
        w.p.send_signal(signal.SIGTERM)
        self.assertEqual(w.wait(), 0, w.text())
        self.assertIn("drained, bye", w.text())

    def test_sigterm_mid_job_loses_nothing_and_the_job_comes_back_with_its_checkpoint(self) -> None:
        q = "py.sigterm"
        quick = [self.c.enqueue(q, {"rows": 1})["job_id"] for _ in range(5)]
        long = self.c.enqueue(q, {"rows": 1000000}, retry_backoff="none", max_retries=5)["job_id"]
        w = Proc(os.path.join(EXAMPLES, "worker.py"), {"CORVO_URL": self.server.url, "CORVO_QUEUES": q, "CORVO_SHUTDOWN_GRACE": "0.3"}, EXAMPLES)
        self.addCleanup(w.kill)
        for jid in quick:
            wait_state(self.c, jid, "completed")

        def checkpointed() -> Any:
            cp = self.c.job(long).get("checkpoint")
            return cp if cp and cp.get("offset", 0) > 0 else None

        until("the long job's checkpoint", checkpointed)
        w.p.send_signal(signal.SIGTERM)
        self.assertEqual(w.wait(), 0, w.text())
        self.assertIn("drained, bye", w.text())
        doc = self.c.job(long)
        self.assertEqual(doc["state"], "pending", "the leftover job is not back")
        self.assertEqual([e["error"] for e in doc["errors"]], ["worker_shutdown"])
        self.assertGreaterEqual(doc["checkpoint"]["offset"], 20)
        again = self.c.fetch([q], worker_id="py-check", timeout=5)
        self.assertEqual(len(again), 1)
        self.assertEqual(again[0]["job_id"], long)
        self.assertEqual(again[0]["attempt"], 2)
        self.assertEqual(again[0]["checkpoint"], doc["checkpoint"])
        for jid in quick:
            self.assertEqual(self.c.job(jid)["state"], "completed")


if __name__ == "__main__":
    unittest.main()
