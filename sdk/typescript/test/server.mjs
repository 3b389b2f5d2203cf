// Test helpers: a real corvo server per test file, on a free 127.0.0.1
// port and a fresh data dir, killed when the tests end.
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const pkgDir = resolve(dirname(fileURLToPath(import.meta.url)), "..");
export const repoRoot = resolve(pkgDir, "../..");

let built;

/** The cluster secret of the test servers. */
export const testClusterSecret = "sdk-test-cluster-secret-0123456789abcdef";

/** The server binary: $CORVO_BIN, else this repository's, built once per test process. */
export function serverBinary() {
  if (process.env.CORVO_BIN) return process.env.CORVO_BIN;
  if (!built) {
    const dir = mkdtempSync(join(tmpdir(), "corvo-ts-bin-"));
    built = join(dir, "corvo");
    execFileSync("go", ["build", "-o", built, "./cmd/corvo"], { cwd: repoRoot, stdio: "inherit" });
    process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
  }
  return built;
}

/** A free TCP address on 127.0.0.1. */
export function freeAddr() {
  return new Promise((res, rej) => {
    const s = createServer();
    s.once("error", rej);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => res(`127.0.0.1:${port}`));
    });
  });
}

/** Starts a server with extra flags; answers {url, stop}. stop() kills it and removes its data dir. */
export async function startServer(args = []) {
  const bin = serverBinary();
  const http = await freeAddr();
  const raft = await freeAddr();
  const data = mkdtempSync(join(tmpdir(), "corvo-ts-data-"));
  const proc = spawn(bin, ["server", "--bind", http, "--raft-bind", raft, "--data-dir", data, "--log-level", "error", ...args], {
    stdio: ["ignore", "ignore", "inherit"],
    env: { ...process.env, CORVO_CLUSTER_SECRET: testClusterSecret }, // the nodes of a test cluster share it
  });
  let exited = false;
  proc.once("exit", () => (exited = true));
  const url = `http://${http}`;
  const stop = async () => {
    if (!exited) {
      const gone = new Promise((r) => proc.once("exit", r));
      proc.kill("SIGKILL");
      await gone;
    }
    rmSync(data, { recursive: true, force: true });
  };
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    if (exited) break;
    try {
      const res = await fetch(url + "/healthz");
      if (res.status === 200) return { url, stop, proc };
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  await stop();
  throw new Error("the corvo server did not start");
}

/** Polls until fn() answers something truthy (deadline: ms). */
export async function until(what, fn, ms = 20_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Waits until the job is in state; answers the job. */
export function waitState(client, id, state) {
  return until(`job ${id} to be ${state}`, async () => {
    const j = await client.job(id);
    return j.state === state ? j : null;
  });
}
