"""An example Corvo producer in Python: enqueues CORVO_JOBS report jobs (10
by default) on "reports.generate" (or CORVO_QUEUE) from several threads at
once — the client gathers concurrent calls into batch requests by itself —
then one job that fails, to show a retry, and prints each job's ID.

    CORVO_URL=http://localhost:8080 python3 producer.py
"""

import os
from concurrent.futures import ThreadPoolExecutor

from corvo import Client

client = Client(os.environ.get("CORVO_URL", "http://localhost:8080"))
queue = os.environ.get("CORVO_QUEUE", "reports.generate")
jobs = int(os.environ.get("CORVO_JOBS", "10"))


def enqueue(i):
    return client.enqueue(queue, {"rows": 40 + i}, tags={"source": "example"}, max_retries=5)["job_id"]


with ThreadPoolExecutor(8) as pool:
    for job_id in pool.map(enqueue, range(jobs)):
        print("enqueued", job_id, flush=True)

failing = client.enqueue(queue, {"rows": 1, "fail": True}, max_retries=2, retry_backoff="fixed", retry_base_delay="1s")
print("enqueued", failing["job_id"], "(fails, then goes dead)", flush=True)
