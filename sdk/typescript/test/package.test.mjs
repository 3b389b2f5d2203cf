// The package as a user gets it: `npm pack` makes a tarball that installs
// (offline: it has no runtime dependencies) and runs in an empty
// directory; the README's TypeScript quick start and examples/worker-ts
// compile against it and run against a real server, and a worker killed
// with SIGTERM mid-job loses nothing.
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { copyFileSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { Client } from "../dist/index.js";
import { pkgDir, repoRoot, startServer, until, waitState } from "./server.mjs";

let server;
let app; // an empty directory the tarball is installed in
let tmp;

const npm = (args, cwd) => execFileSync("npm", args, { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });

before(async () => {
  server = await startServer();
  tmp = mkdtempSync(join(tmpdir(), "corvo-ts-pack-"));
  const packed = JSON.parse(npm(["pack", "--json", "--pack-destination", tmp], pkgDir));
  const tarball = join(tmp, packed[0].filename);
  app = join(tmp, "app");
  execFileSync("mkdir", [app]);
  writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", private: true, type: "module" }));
  npm(["install", "--offline", "--no-audit", "--no-fund", tarball], app);
});

after(async () => {
  await server?.stop();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

/** Compiles TypeScript files in app with the package's compiler, as a user's build would. */
function compile(files) {
  const tsc = join(pkgDir, "node_modules/typescript/bin/tsc");
  const args = ["--module", "nodenext", "--moduleResolution", "nodenext", "--target", "es2022", "--strict", "--skipLibCheck",
    "--types", "node", "--typeRoots", join(pkgDir, "node_modules/@types"), ...files];
  try {
    execFileSync(process.execPath, [tsc, ...args], { cwd: app, encoding: "utf8" });
  } catch (err) {
    assert.fail(`tsc ${files.join(" ")}:\n${err.stdout}${err.stderr}`);
  }
}

/** Runs a compiled script in app; answers the process and its output so far. */
function run(script, env) {
  const proc = spawn(process.execPath, [script], { cwd: app, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  const out = { text: "" };
  proc.stdout.on("data", (d) => (out.text += d));
  proc.stderr.on("data", (d) => (out.text += d));
  const exited = new Promise((r) => proc.once("exit", (code, signal) => r({ code, signal })));
  return { proc, out, exited };
}

test("npm pack ships the built ESM and its declarations, nothing else", () => {
  const files = readdirSync(join(app, "node_modules/@corvohq/corvo/dist")).sort();
  for (const f of ["index.js", "index.d.ts", "client.js", "client.d.ts", "worker.js", "worker.d.ts", "errors.js", "types.d.ts"]) {
    assert.ok(files.includes(f), `dist/${f} missing from the package: ${files}`);
  }
  const pkg = JSON.parse(readFileSync(join(app, "node_modules/@corvohq/corvo/package.json"), "utf8"));
  assert.deepEqual(pkg.dependencies ?? {}, {}, "runtime dependencies");
  assert.deepEqual(readdirSync(join(app, "node_modules")).filter((f) => !f.startsWith(".")), ["@corvohq"], "installing pulled in more packages");
});

/** The block after `<!-- quickstart:typescript -->` in a README (path from the repository root). */
function quickstart(readmePath) {
  const readme = readFileSync(join(repoRoot, readmePath), "utf8");
  const at = readme.indexOf("<!-- quickstart:typescript -->");
  assert.ok(at >= 0, `${readmePath} has no TypeScript quick start`);
  const start = readme.indexOf("```ts\n", at) + "```ts\n".length;
  return readme.slice(start, readme.indexOf("```", start));
}

/**
 * Writes a quick start as name.mjs (run as it is) or name.ts (compiled),
 * as the README says either works; answers the script to run.
 */
function prepare(block, name, as) {
  if (as === "mjs") {
    writeFileSync(join(app, `${name}.mjs`), block);
    return `${name}.mjs`;
  }
  writeFileSync(join(app, `${name}.ts`), block);
  compile([`${name}.ts`]);
  return `${name}.js`;
}

for (const as of ["ts", "mjs"]) {
  test(`the README's TypeScript quick start runs verbatim (as .${as})`, async () => {
    const script = prepare(quickstart("README.md"), "quickstart", as);
    const { proc, out, exited } = run(script, { CORVO_URL: server.url });
    try {
      const id = await until("the quick start's job id", () => /enqueued (job_\S+)/.exec(out.text)?.[1]);
      const c = new Client(server.url);
      const job = await waitState(c, id, "completed");
      assert.deepEqual(job.result, { sent: true });
      proc.kill("SIGTERM");
      assert.deepEqual(await exited, { code: 0, signal: null }, out.text);
    } finally {
      proc.kill("SIGKILL");
    }
  });
}

let sdkRuns = 0;
for (const as of ["mjs", "ts"]) {
  test(`sdk/typescript/README.md's quick start runs verbatim (as .${as}): every job acked with its result, progress and checkpoint`, async () => {
    const script = prepare(quickstart("sdk/typescript/README.md"), "sdkquickstart", as);
    const want = 10 * ++sdkRuns; // the same queue each run
    const { proc, out, exited } = run(script, { CORVO_URL: server.url });
    const c = new Client(server.url);
    try {
      await until("the quick start's enqueues", () => /enqueued 10 jobs/.test(out.text));
      await until("the quick start's jobs to complete", async () => {
        const q = (await c.queues()).find((q) => q.name === "reports.build");
        return q && q.completed === want;
      });
      proc.kill("SIGTERM");
      assert.deepEqual(await exited, { code: 0, signal: null }, out.text);
      assert.match(out.text, /drained/);
    } finally {
      proc.kill("SIGKILL");
    }
    const hits = await until("the mirror's view of the completed jobs", async () => {
      const all = [];
      for await (const h of c.searchAll({ queue: "reports.build", state: ["completed"] })) all.push(h);
      return all.length === want && all;
    });
    for (const h of hits) {
      const job = await c.job(h.id);
      assert.deepEqual(job.result, { pages: 5 }, JSON.stringify(job));
      assert.deepEqual(job.checkpoint, { page: 5 });
      assert.deepEqual(job.progress, { current: 5, total: 5, message: "rendering" }, "the progress travelled with the checkpoints");
      assert.equal(job.attempt, 1);
    }
  });
}

test("examples/worker-ts: SIGTERM mid-job loses nothing; the job comes back with its checkpoint", async () => {
  copyFileSync(join(repoRoot, "examples/worker-ts/worker.ts"), join(app, "worker.ts"));
  compile(["worker.ts"]);
  const c = new Client(server.url);
  const q = "ts.sigterm";
  const quick = [];
  for (let i = 0; i < 5; i++) quick.push((await c.enqueue({ queue: q, payload: { rows: 1 } })).job_id);
  const long = (await c.enqueue({ queue: q, payload: { rows: 1_000_000 }, retry_backoff: "none", max_retries: 5 })).job_id;
  const { proc, out, exited } = run("worker.js", { CORVO_URL: server.url, CORVO_QUEUES: q, CORVO_SHUTDOWN_GRACE_MS: "300" });
  try {
    for (const id of quick) await waitState(c, id, "completed");
    const seen = await until("the long job's checkpoint", async () => (await c.job(long)).checkpoint?.offset > 0 && (await c.job(long)).checkpoint);
    proc.kill("SIGTERM");
    assert.deepEqual(await exited, { code: 0, signal: null }, out.text);
    assert.match(out.text, /drained, bye/);
  } finally {
    proc.kill("SIGKILL");
  }
  // The long-poll the drain closed may still be waiting at the server and
  // claim the job the moment it is failed; the server then finds the
  // connection gone and hands the job back (gateway/undelivered.go): a
  // moment "active", then pending again.
  const doc = await waitState(c, long, "pending");
  assert.deepEqual(doc.errors.map((e) => e.error), ["worker_shutdown"]);
  assert.ok(doc.checkpoint.offset >= 20, `checkpoint ${JSON.stringify(doc.checkpoint)}`);
  const [again] = await c.fetch({ queues: [q], worker_id: "ts-check", timeout: 5 });
  assert.equal(again.job_id, long);
  assert.equal(again.attempt, 2);
  assert.deepEqual(again.checkpoint, doc.checkpoint);
  for (const id of quick) assert.equal((await c.job(id)).state, "completed");
});
