// The client's transport for whole answers (every call but the streams):
// node:http and node:https over kept-alive connections by default, or the
// fetch implementation given in ClientOptions.fetch.
//
// Why not the global fetch: measured end to end (sdk/typescript/bench),
// undici's fetch spent about half the process's CPU per request in its
// own machinery (WHATWG streams, Headers, an AbortController per
// request, a body and headers written apart); node:http does a request in
// one write and reads the answer into a string.
import * as http from "node:http";
import * as https from "node:https";

/** A whole answer. */
export interface Reply {
  status: number;
  /** A header's value (name in lower case); null when absent. */
  header(name: string): string | null;
  text: string;
}

/** Sends one request and reads its whole answer; rejects when no answer came (the error's `code` says why, as node:net's do). */
export type Send = (
  base: string,
  path: string,
  method: string,
  headers: Record<string, string>,
  body: string | Uint8Array | undefined,
  signal: AbortSignal | undefined,
) => Promise<Reply>;

/** A Send over a fetch implementation. */
export function fetchSend(f: typeof fetch): Send {
  return async (base, path, method, headers, body, signal) => {
    const res = await f(base + path, { method, headers, body, signal });
    const text = await res.text();
    return { status: res.status, header: (n) => res.headers.get(n), text };
  };
}

/**
 * How long a connection stays open unused (as undici's default): well
 * under any server's or proxy's idle timeout, so a request rarely meets a
 * connection the other end is closing.
 */
const idleMs = 4_000;

interface Base {
  https: boolean;
  host: string;
  port: number;
  prefix: string;
}

/** Marks an error of a request sent on a kept-alive connection the server had closed: nothing of it was read, send it again. */
export const staleConnection = Symbol("corvo.staleConnection");

/** A Send over node:http/node:https with kept-alive connections (one pool per client). */
export function httpSend(): Send {
  const agents = {
    http: new http.Agent({ keepAlive: true, timeout: idleMs, scheduling: "lifo" }),
    https: new https.Agent({ keepAlive: true, timeout: idleMs, scheduling: "lifo" }),
  };
  const bases = new Map<string, Base>();
  const parse = (base: string): Base => {
    let b = bases.get(base);
    if (!b) {
      const u = new URL(base);
      if (u.protocol !== "http:" && u.protocol !== "https:") throw new Error(`corvo: not an http(s) URL: ${base}`);
      const secure = u.protocol === "https:";
      b = {
        https: secure,
        host: u.hostname.startsWith("[") ? u.hostname.slice(1, -1) : u.hostname,
        port: u.port ? Number(u.port) : secure ? 443 : 80,
        prefix: u.pathname.replace(/\/+$/, ""),
      };
      bases.set(base, b);
    }
    return b;
  };
  return (base, path, method, headers, body, signal) => {
    const b = parse(base);
    const h: Record<string, string | number> = { ...headers };
    if (body !== undefined) h["Content-Length"] = typeof body === "string" ? Buffer.byteLength(body) : body.byteLength;
    else if (method === "POST" || method === "PUT" || method === "PATCH") h["Content-Length"] = 0;
    return new Promise<Reply>((resolve, reject) => {
      const req = (b.https ? https : http).request({
        host: b.host,
        port: b.port,
        path: b.prefix + path,
        method,
        headers: h,
        agent: b.https ? agents.https : agents.http,
        signal,
      });
      req.on("error", (err: NodeJS.ErrnoException) => {
        // A kept-alive connection closed by the server as the request went out.
        if (req.reusedSocket && (err.code === "ECONNRESET" || err.code === "EPIPE") && !signal?.aborted) {
          (err as unknown as Record<symbol, boolean>)[staleConnection] = true;
        }
        reject(err);
      });
      req.on("response", (res: http.IncomingMessage) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => (text += chunk));
        res.on("error", reject);
        res.on("end", () =>
          resolve({
            status: res.statusCode ?? 0,
            header: (n) => {
              const v = res.headers[n.toLowerCase()];
              return v === undefined ? null : Array.isArray(v) ? v.join(", ") : v;
            },
            text,
          }),
        );
        res.on("close", () => {
          if (!res.complete) reject(Object.assign(new Error("corvo: the connection closed before the whole answer came"), { code: "ECONNRESET" }));
        });
      });
      req.end(body);
    });
  };
}
