// The client's transport for whole answers (every call but the streams):
// HTTP/1.1 written and read by hand over kept-alive node:net/node:tls
// connections by default, or the fetch implementation given in
// ClientOptions.fetch.
//
// Why by hand: measured (sdk/typescript/bench), undici's fetch spent about
// half the process's CPU per request in its own machinery (WHATWG streams,
// Headers, an AbortController per request), and node:http still about 75
// µs per request where a request written in one piece and an answer parsed
// from its bytes take about 20 (the same finding as sdk/python/_http.py's).
import * as net from "node:net";
import * as tls from "node:tls";

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
/** Unused connections kept per base URL; more are opened when more requests run at once. */
const maxIdle = 64;
/** The longest status line, header block or chunk-size line read. */
const maxHead = 64 << 10;

/** Marks an error of a request sent on a kept-alive connection the server had closed: nothing of it was read, send it again. */
export const staleConnection = Symbol("corvo.staleConnection");

interface Base {
  secure: boolean;
  host: string; // for connecting (no brackets)
  port: number;
  hostHeader: string;
  prefix: string;
  idle: Conn[];
}

interface Pending {
  method: string;
  resolve: (r: Reply) => void;
  reject: (err: unknown) => void;
  reused: boolean;
}

function errorWithCode(msg: string, code: string): Error {
  return Object.assign(new Error(msg), { code });
}

const CRLFCRLF = Buffer.from("\r\n\r\n");

/** One kept-alive connection: one request at a time, its answer parsed from the bytes as they come. */
class Conn {
  readonly sock: net.Socket;
  private cur: Pending | null = null;
  private buf: Buffer = Buffer.alloc(0);
  private gotBytes = false;
  // The answer being read.
  private status = 0;
  private headers: Map<string, string> | null = null;
  private keep = true;
  private mode: "head" | "length" | "chunked" | "close" = "head";
  private left = 0; // "length": bytes to come; "chunked": bytes of the chunk to come (-1: a size line next)
  private parts: Buffer[] = [];
  private trailers = false;
  dead = false;

  constructor(
    private readonly base: Base,
    private readonly onFree: (c: Conn) => void,
  ) {
    const opts = { host: base.host, port: base.port };
    this.sock = base.secure
      ? tls.connect({ ...opts, servername: net.isIP(base.host) ? undefined : base.host, ALPNProtocols: ["http/1.1"] })
      : net.connect(opts);
    this.sock.setNoDelay(true);
    this.sock.on("data", (d: Buffer) => this.onData(d));
    this.sock.on("error", (err) => this.fail(err));
    this.sock.on("close", () => this.fail(null));
    this.sock.on("timeout", () => {
      if (!this.cur) this.destroy(); // unused for idleMs
    });
  }

  /** Sends a request (msg: its bytes) and resolves with its answer. */
  send(msg: string | Buffer, method: string, reused: boolean, resolve: (r: Reply) => void, reject: (err: unknown) => void): void {
    this.cur = { method, resolve, reject, reused };
    this.gotBytes = false;
    this.status = 0;
    this.headers = null;
    this.mode = "head";
    this.parts = [];
    this.sock.setTimeout(0);
    this.sock.ref();
    this.sock.write(msg);
  }

  destroy(err?: Error): void {
    this.dead = true;
    this.sock.destroy(err);
  }

  /** The connection failed or closed (err null): the request in flight, if any, gets an error. */
  private fail(err: Error | null): void {
    this.dead = true;
    const p = this.cur;
    if (!p) {
      const i = this.base.idle.indexOf(this);
      if (i >= 0) this.base.idle.splice(i, 1); // closed while unused
      return;
    }
    if (this.mode === "close" && err === null && this.headers) return this.finish(); // the answer ends with the connection
    this.cur = null;
    const e = (err ?? errorWithCode("corvo: the connection closed before the whole answer came", "ECONNRESET")) as NodeJS.ErrnoException;
    // A kept-alive connection the server closed as the request went out: nothing of it was read.
    if (p.reused && !this.gotBytes && (err === null || e.code === "ECONNRESET" || e.code === "EPIPE")) {
      (e as unknown as Record<symbol, boolean>)[staleConnection] = true;
    }
    p.reject(e);
  }

  private onData(d: Buffer): void {
    if (!this.cur) {
      this.destroy(); // bytes nobody asked for
      return;
    }
    this.gotBytes = true;
    this.buf = this.buf.length === 0 ? d : Buffer.concat([this.buf, d]);
    try {
      this.parse();
    } catch (err) {
      this.destroy();
      this.fail(err as Error);
    }
  }

  private parse(): void {
    for (;;) {
      switch (this.mode) {
        case "head": {
          const end = this.buf.indexOf(CRLFCRLF);
          if (end < 0) {
            if (this.buf.length > maxHead) throw errorWithCode("corvo: an answer's header is too long", "HPE_HEADER_OVERFLOW");
            return;
          }
          const lines = this.buf.toString("latin1", 0, end).split("\r\n");
          this.buf = this.buf.subarray(end + 4);
          const m = /^HTTP\/1\.([01]) (\d{3})/.exec(lines[0]);
          if (!m) throw errorWithCode("corvo: not an HTTP/1.x answer", "HPE_INVALID_CONSTANT");
          const status = Number(m[2]);
          if (status >= 100 && status < 200) continue; // an interim answer: the real one follows
          const headers = new Map<string, string>();
          for (let i = 1; i < lines.length; i++) {
            const colon = lines[i].indexOf(":");
            if (colon <= 0) continue;
            const k = lines[i].slice(0, colon).trim().toLowerCase();
            const v = lines[i].slice(colon + 1).trim();
            const had = headers.get(k);
            headers.set(k, had === undefined ? v : had + ", " + v);
          }
          this.status = status;
          this.headers = headers;
          const conn = (headers.get("connection") ?? "").toLowerCase();
          this.keep = m[1] === "1" ? conn !== "close" : conn === "keep-alive";
          if (status === 204 || status === 304 || this.cur!.method === "HEAD") {
            this.mode = "length";
            this.left = 0;
          } else if ((headers.get("transfer-encoding") ?? "").toLowerCase().includes("chunked")) {
            this.mode = "chunked";
            this.left = -1;
            this.trailers = false;
          } else if (headers.has("content-length")) {
            this.mode = "length";
            this.left = Number(headers.get("content-length"));
            if (!Number.isSafeInteger(this.left) || this.left < 0) throw errorWithCode("corvo: a bad Content-Length", "HPE_INVALID_CONTENT_LENGTH");
          } else {
            this.mode = "close"; // the answer ends with the connection
            this.keep = false;
          }
          continue;
        }
        case "length": {
          const n = Math.min(this.left, this.buf.length);
          if (n > 0) {
            this.parts.push(this.buf.subarray(0, n));
            this.buf = this.buf.subarray(n);
            this.left -= n;
          }
          if (this.left > 0) return;
          this.finish();
          return;
        }
        case "chunked": {
          if (this.left < 0) {
            const nl = this.buf.indexOf("\r\n");
            if (nl < 0) {
              if (this.buf.length > maxHead) throw errorWithCode("corvo: a chunk's size line is too long", "HPE_CHUNK_EXTENSIONS_OVERFLOW");
              return;
            }
            const line = this.buf.toString("latin1", 0, nl);
            this.buf = this.buf.subarray(nl + 2);
            if (this.trailers) {
              if (line === "") {
                this.finish();
                return;
              }
              continue; // a trailer
            }
            const size = parseInt(line.split(";", 1)[0].trim(), 16);
            if (!Number.isSafeInteger(size) || size < 0) throw errorWithCode("corvo: a bad chunk size", "HPE_INVALID_CHUNK_SIZE");
            if (size === 0) {
              this.trailers = true; // then trailers, up to an empty line
              continue;
            }
            this.left = size + 2; // the data and its CRLF
            continue;
          }
          const n = Math.min(this.left, this.buf.length);
          if (n > 0) {
            const data = Math.min(n, Math.max(this.left - 2, 0));
            if (data > 0) this.parts.push(this.buf.subarray(0, data));
            this.buf = this.buf.subarray(n);
            this.left -= n;
          }
          if (this.left > 0) return;
          this.left = -1;
          continue;
        }
        case "close": {
          if (this.buf.length > 0) {
            this.parts.push(this.buf);
            this.buf = Buffer.alloc(0);
          }
          return;
        }
      }
    }
  }

  /** The answer is whole: hands it over and frees the connection (or closes it). */
  private finish(): void {
    const p = this.cur!;
    this.cur = null;
    const headers = this.headers!;
    const text = this.parts.length === 1 ? this.parts[0].toString("utf8") : Buffer.concat(this.parts).toString("utf8");
    this.parts = [];
    const reply: Reply = { status: this.status, header: (n) => headers.get(n.toLowerCase()) ?? null, text };
    if (this.keep && !this.dead && this.buf.length === 0) {
      this.sock.unref();
      this.sock.setTimeout(idleMs);
      this.onFree(this);
    } else {
      this.destroy();
    }
    p.resolve(reply);
  }
}

/** A Send writing HTTP/1.1 by hand over kept-alive connections (a pool per base URL, per client). */
export function httpSend(): Send {
  const bases = new Map<string, Base>();
  const parse = (base: string): Base => {
    let b = bases.get(base);
    if (!b) {
      const u = new URL(base);
      if (u.protocol !== "http:" && u.protocol !== "https:") throw new Error(`corvo: not an http(s) URL: ${base}`);
      const secure = u.protocol === "https:";
      b = {
        secure,
        host: u.hostname.startsWith("[") ? u.hostname.slice(1, -1) : u.hostname,
        port: u.port ? Number(u.port) : secure ? 443 : 80,
        hostHeader: u.host,
        prefix: u.pathname.replace(/\/+$/, ""),
        idle: [],
      };
      bases.set(base, b);
    }
    return b;
  };
  const free = (b: Base) => (c: Conn) => {
    if (b.idle.length < maxIdle) b.idle.push(c);
    else c.destroy();
  };
  return (base, path, method, headers, body, signal) => {
    const b = parse(base);
    let head = `${method} ${b.prefix}${path} HTTP/1.1\r\nHost: ${b.hostHeader}\r\n`;
    for (const k in headers) head += `${k}: ${headers[k]}\r\n`;
    let msg: string | Buffer;
    if (body === undefined) {
      msg = head + (method === "POST" || method === "PUT" || method === "PATCH" ? "Content-Length: 0\r\n\r\n" : "\r\n");
    } else if (typeof body === "string") {
      msg = head + `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n` + body;
    } else {
      msg = Buffer.concat([Buffer.from(head + `Content-Length: ${body.byteLength}\r\n\r\n`, "latin1"), body]);
    }
    return new Promise<Reply>((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      let c: Conn | undefined;
      while ((c = b.idle.pop()) && c.dead); // the most recently used first
      const reused = c !== undefined;
      if (!c) c = new Conn(b, free(b));
      const conn = c;
      let onAbort: (() => void) | undefined;
      if (signal) {
        onAbort = () => {
          conn.destroy();
          reject(signal.reason);
        };
        signal.addEventListener("abort", onAbort, { once: true });
      }
      conn.send(
        msg,
        method,
        reused,
        (r) => {
          if (onAbort) signal!.removeEventListener("abort", onAbort);
          resolve(r);
        },
        (err) => {
          if (onAbort) signal!.removeEventListener("abort", onAbort);
          reject(err);
        },
      );
    });
  };
}
