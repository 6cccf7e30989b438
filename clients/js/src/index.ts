/**
 * @sandq/client: a client for sandq's HTTP API (docs/api.md), with no
 * runtime dependency: Node 20's fetch and Web Crypto.
 */
export { Client, SessionHandle, outputBytes, parseRetryAfter, retryable } from "./client.js";
export type { CallOptions, ClientOptions, EventsOptions, JobOutput, JudgeOptions, RetryInfo, SubmitOptions, WaitOptions } from "./client.js";
export { ApiError, SessionEnded, WaitTimeout } from "./errors.js";
export { parseSse, type SseMessage } from "./sse.js";
export { signWebhook, verifyWebhook, type VerifyOptions } from "./webhook.js";
export { FINAL_STATUSES, isFinal } from "./types.js";
export type * from "./types.js";
