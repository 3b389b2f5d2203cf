// End-to-end throughput of the TypeScript SDK, the shape of
// `corvo bench --client sdk --mode e2e`: --producers loops calling
// client.enqueue (coalesced by the client) while one Worker of
// --concurrency slots runs a no-op handler, untuned, until --jobs jobs
// have been handled. Prints one JSON line.
//
//   npm run build && node bench/e2e.mjs --url http://127.0.0.1:8080 --jobs 50000 --producers 16 --concurrency 32
import { parseArgs } from "node:util";
import { Client, Worker } from "../dist/index.js";

const { values: a } = parseArgs({
  options: {
    url: { type: "string", default: "http://127.0.0.1:8080" },
    jobs: { type: "string", default: "50000" },
    producers: { type: "string", default: "16" },
    concurrency: { type: "string", default: "32" },
    queue: { type: "string", default: "bench.ts" },
    "payload-size": { type: "string", default: "64" },
  },
});
const jobs = Number(a.jobs);
const payload = { data: "x".repeat(Math.max(0, Number(a["payload-size"]) - 12)) };
const client = new Client(a.url);
const worker = new Worker(client, { concurrency: Number(a.concurrency), handleSignals: false });
let handled = 0;
let allHandled;
const done = new Promise((r) => (allHandled = r));
worker.register(a.queue, () => {
  if (++handled === jobs) allHandled();
});
const start = performance.now();
const running = worker.run();
let next = 0;
let enqueued = 0;
await Promise.all(
  Array.from({ length: Number(a.producers) }, async () => {
    while (next < jobs) {
      next++;
      await client.enqueue({ queue: a.queue, payload });
      enqueued++;
    }
  }),
);
const enqueueSecs = (performance.now() - start) / 1000;
await done;
const secs = (performance.now() - start) / 1000;
worker.stop();
await running;
console.log(JSON.stringify({ sdk: "typescript", jobs, producers: Number(a.producers), concurrency: Number(a.concurrency),
  seconds: +secs.toFixed(2), e2e_jobs_s: Math.round(jobs / secs), enqueue_jobs_s: Math.round(enqueued / enqueueSecs) }));
