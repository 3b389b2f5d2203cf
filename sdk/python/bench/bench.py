"""End-to-end throughput of the Python SDK, the shape of
``corvo bench --client sdk --mode e2e`` and of sdk/typescript/bench/e2e.mjs:
--producers threads calling client.enqueue (coalesced by the client) while
one Worker of --concurrency slots runs a handler, untuned, until --jobs jobs
have been handled. The handler returns at once, or sleeps --job-time-ms
first (a handler that waits on I/O). With --backlog the jobs are enqueued
(in batches of 1,000) before the worker starts, and only the worker is
timed. Prints one JSON line.

    python3 sdk/python/bench/bench.py --url http://127.0.0.1:8080 --jobs 50000 --producers 16 --concurrency 32
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from corvo import Client, Worker  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8080")
    p.add_argument("--jobs", type=int, default=50000)
    p.add_argument("--producers", type=int, default=16)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--queue", default="bench.py")
    p.add_argument("--payload-size", type=int, default=64)
    p.add_argument("--backlog", action="store_true", help="enqueue every job first; time the worker alone")
    p.add_argument("--job-time-ms", type=float, default=0, help="each handler sleeps this long before it returns")
    p.add_argument("--prefetch-under", type=float, help="the worker's prefetch_under, in seconds (default: the worker's)")
    p.add_argument("--profile", help="write a cProfile of the run (every thread) to this file")
    a = p.parse_args()

    profiles = []
    if a.profile:
        # cProfile sees one thread: give each thread its own, merged at the end.
        import cProfile

        run = threading.Thread.run

        def profiled(self):
            prof = cProfile.Profile(time.thread_time)  # CPU time, not waits
            profiles.append(prof)
            prof.enable()
            try:
                run(self)
            finally:
                prof.disable()

        threading.Thread.run = profiled
    jobs = a.jobs
    payload = {"data": "x" * max(0, a.payload_size - 12)}
    client = Client(a.url)
    wkw = {} if a.prefetch_under is None else {"prefetch_under": a.prefetch_under}
    worker = Worker(client, concurrency=a.concurrency, handle_signals=False, **wkw)
    job_time = a.job_time_ms / 1000
    lock = threading.Lock()
    handled = [0]
    all_handled = threading.Event()

    def handler(job, ctx):
        if job_time > 0:
            time.sleep(job_time)
        with lock:
            handled[0] += 1
            if handled[0] == jobs:
                all_handled.set()

    worker.register(a.queue, handler)
    if a.backlog:
        for i in range(0, jobs, 1000):
            client.enqueue_batch([{"queue": a.queue, "payload": payload} for _ in range(min(1000, jobs - i))])
    start = time.perf_counter()
    running = threading.Thread(target=worker.run, daemon=True)
    running.start()
    nxt = [0]
    enqueued = [0]

    def producer():
        while True:
            with lock:
                if nxt[0] >= jobs:
                    return
                nxt[0] += 1
            client.enqueue(a.queue, payload)
            with lock:
                enqueued[0] += 1

    producers = [threading.Thread(target=producer) for _ in range(0 if a.backlog else a.producers)]
    for t in producers:
        t.start()
    for t in producers:
        t.join()
    enqueue_secs = time.perf_counter() - start
    all_handled.wait()
    secs = time.perf_counter() - start
    worker.stop()
    running.join()
    if profiles:
        import pstats

        st = pstats.Stats(profiles[0])
        for prof in profiles[1:]:
            st.add(prof)
        st.dump_stats(a.profile)
    print(
        json.dumps(
            {
                "sdk": "python",
                "jobs": jobs,
                "producers": a.producers,
                "concurrency": a.concurrency,
                "job_time_ms": a.job_time_ms,
                "seconds": round(secs, 2),
                "e2e_jobs_s": round(jobs / secs),
                "enqueue_jobs_s": None if a.backlog else round(enqueued[0] / enqueue_secs),
                "backlog": a.backlog,
            }
        )
    )


if __name__ == "__main__":
    main()
