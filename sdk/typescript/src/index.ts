// @corvohq/corvo: the TypeScript client and worker runtime of the Corvo job
// server. See README.md for a quick start and the API reference.
export { Client, type ClientOptions, type CallOptions } from "./client.js";
export { Worker, JobContext, type WorkerOptions, type Handler } from "./worker.js";
export * from "./errors.js";
export type * from "./types.js";
export { ForwardedHeader, shardForQueue, shardOfJobId, xxhash64 } from "./placement.js";
