// An example Corvo worker in TypeScript to copy: it processes the
// "reports.generate" queue (or CORVO_QUEUES) with CORVO_CONCURRENCY
// handlers, reports progress, checkpoints long work so a retry resumes
// where it stopped, and drains on SIGTERM (Kubernetes) or Ctrl-C.
//
//   (cd ../../sdk/typescript && npm ci && npm run build)   # the SDK this links to
//   npm install && npx tsc && CORVO_URL=http://localhost:8080 node worker.js
import { Client, Worker, type FetchedJob, type JobContext } from "@corvohq/corvo";

interface Report {
  rows: number; // rows to process
  fail?: boolean; // lets the demo show a failure
}

const url = process.env.CORVO_URL ?? "http://localhost:8080";
const queues = (process.env.CORVO_QUEUES ?? "reports.generate").split(",");
const concurrency = Number(process.env.CORVO_CONCURRENCY ?? 10);
const shutdownGraceMs = Number(process.env.CORVO_SHUTDOWN_GRACE_MS ?? 25_000);

async function generate(job: FetchedJob<Report>, ctx: JobContext): Promise<{ processed: number }> {
  if (job.payload.fail) throw new Error("report source unavailable");
  // Resume from the checkpoint of an interrupted attempt.
  const start: number = job.checkpoint?.offset ?? 0;
  for (let row = start; row < job.payload.rows; row++) {
    await new Promise((r) => setTimeout(r, 5)); // one row of work
    if (row % 20 === 0) {
      ctx.progress({ current: row, total: job.payload.rows });
      await ctx.checkpoint({ offset: row }); // stored on the server now
    }
    // Cancelled from the UI/API, the lease lost, or the drain's grace over:
    // stop (the checkpoint is saved; a retry resumes from it).
    ctx.signal.throwIfAborted();
  }
  return { processed: job.payload.rows - start };
}

const worker = new Worker(new Client(url), { concurrency, shutdownGraceMs });
for (const q of queues) worker.register(q, generate);

console.log(`worker ${worker.id}: processing ${queues.join(",")} on ${url}`);
await worker.run(); // until SIGTERM/SIGINT: stop fetching, finish or hand back running jobs
console.log(`worker ${worker.id}: drained, bye`);
