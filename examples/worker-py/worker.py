"""An example Corvo worker in Python to copy: it processes the
"reports.generate" queue (or CORVO_QUEUES) with CORVO_CONCURRENCY handler
threads, reports progress, checkpoints long work so a retry resumes where it
stopped, and drains on SIGTERM (Kubernetes) or Ctrl-C.

    CORVO_URL=http://localhost:8080 python3 worker.py
"""

import os

from corvo import Client, Worker

url = os.environ.get("CORVO_URL", "http://localhost:8080")
queues = os.environ.get("CORVO_QUEUES", "reports.generate").split(",")
concurrency = int(os.environ.get("CORVO_CONCURRENCY", "10"))
shutdown_grace = float(os.environ.get("CORVO_SHUTDOWN_GRACE", "25"))


def generate(job, ctx):
    report = job["payload"]  # {"rows": rows to process, "fail": lets the demo show a failure}
    if report.get("fail"):
        raise RuntimeError("report source unavailable")
    # Resume from the checkpoint of an interrupted attempt.
    start = (job["checkpoint"] or {}).get("offset", 0)
    for row in range(start, report["rows"]):
        # One row of work; wait() returns True at once when the job is
        # cancelled from the UI/API, its lease is lost, or the drain's grace
        # is over: stop (the checkpoint is saved; a retry resumes from it).
        if ctx.wait(0.005):
            ctx.raise_if_cancelled()
        if row % 20 == 0:
            ctx.progress({"current": row, "total": report["rows"]})
            ctx.checkpoint({"offset": row})  # stored on the server now
    return {"processed": report["rows"] - start}


worker = Worker(Client(url), concurrency=concurrency, shutdown_grace=shutdown_grace)
for q in queues:
    worker.register(q, generate)

print("worker %s: processing %s on %s" % (worker.id, ",".join(queues), url), flush=True)
worker.run()  # until SIGTERM/SIGINT: stop fetching, finish or hand back running jobs
print("worker %s: drained, bye" % worker.id, flush=True)
