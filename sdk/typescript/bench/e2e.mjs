// End-to-end throughput of the TypeScript SDK, the shape of
// `corvo bench --client sdk --mode e2e`: --producers loops calling
// client.enqueue (coalesced by the client) while one Worker of
// --concurrency slots runs a no-op handler (or one that takes
// --job-time-ms), untuned, until --jobs jobs have been handled. Prints one JSON line, with the node process's CPU
// milliseconds per job (user + system).
//
// --mode enqueue runs the producers alone (the jobs stay in the queue);
// --mode work runs the worker alone over --jobs jobs already queued (by
// an enqueue run before it): each side measured without the other.
//
//   npm run build && node bench/e2e.mjs --url http://127.0.0.1:8080 --jobs 50000 --producers 16 --concurrency 32
import { parseArgs } from "node:util";
import { Client, Worker } from "../dist/index.js";

const { values: a } = parseArgs({
  options: {
    url: { type: "string", default: "http://127.0.0.1:8080" },
    mode: { type: "string", default: "e2e" },
    jobs: { type: "string", default: "50000" },
    producers: { type: "string", default: "16" },
    concurrency: { type: "string", default: "32" },
    queue: { type: "string", default: "bench.ts" },
    "payload-size": { type: "string", default: "64" },
    "job-time-ms": { type: "string", default: "0" },
  },
});
if (!["e2e", "enqueue", "work"].includes(a.mode)) throw new Error(`unknown --mode ${a.mode} (e2e, enqueue or work)`);
const produce = a.mode !== "work";
const work = a.mode !== "enqueue";
const jobs = Number(a.jobs);
const payload = { data: "x".repeat(Math.max(0, Number(a["payload-size"]) - 12)) };
const client = new Client(a.url);
const worker = new Worker(client, { concurrency: Number(a.concurrency), handleSignals: false });
let handled = 0;
let allHandled;
const done = new Promise((r) => (allHandled = r));
const jobTimeMs = Number(a["job-time-ms"]);
worker.register(a.queue, async () => {
  if (jobTimeMs > 0) await new Promise((r) => setTimeout(r, jobTimeMs)); // the handler's work
  if (++handled === jobs) allHandled();
});
const cpu0 = process.cpuUsage();
const start = performance.now();
const running = work ? worker.run() : undefined;
let next = 0;
let enqueued = 0;
if (produce) {
  await Promise.all(
    Array.from({ length: Number(a.producers) }, async () => {
      while (next < jobs) {
        next++;
        await client.enqueue({ queue: a.queue, payload });
        enqueued++;
      }
    }),
  );
}
const enqueueSecs = (performance.now() - start) / 1000;
if (work) await done;
const secs = (performance.now() - start) / 1000;
const cpu = process.cpuUsage(cpu0);
if (work) {
  worker.stop();
  await running;
}
const out = { sdk: "typescript", mode: a.mode, jobs, producers: produce ? Number(a.producers) : 0, concurrency: work ? Number(a.concurrency) : 0,
  seconds: +secs.toFixed(2), cpu_ms_per_job: +((cpu.user + cpu.system) / 1000 / jobs).toFixed(3) };
if (a.mode === "e2e") out.e2e_jobs_s = Math.round(jobs / secs);
if (produce) out.enqueue_jobs_s = Math.round(enqueued / enqueueSecs);
if (a.mode === "work") out.work_jobs_s = Math.round(jobs / secs);
console.log(JSON.stringify(out));
