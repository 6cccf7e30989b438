import { ApiError, SessionEnded, WaitTimeout } from "./errors.js";
import { parseSse } from "./sse.js";
import type {
  ArtifactView,
  Batch,
  BatchProgress,
  CellResult,
  Checker,
  Encoding,
  FileEntry,
  Job,
  JobEvent,
  JobView,
  JudgeSpec,
  Language,
  Limits,
  Problem,
  Session,
  SessionSpec,
  TestCase,
} from "./types.js";
import { isFinal } from "./types.js";
import { verifyWebhook, type VerifyOptions } from "./webhook.js";

/** Options of a Client. */
export interface ClientOptions {
  /** The API's base URL; default http://127.0.0.1:8080. */
  url?: string;
  /** An API key (sqk_...), sent as a Bearer token. */
  apiKey?: string;
  /** Each request's time limit beyond any wait it asks the server for, in ms; default 90,000. */
  timeoutMs?: number;
  /** Retries of a request answered 429 or 503 (see retryable); default 5. 0 turns retries off. */
  maxRetries?: number;
  /** The first backoff when the answer has no Retry-After, in ms; doubled each retry; default 500. */
  retryBaseMs?: number;
  /** The longest backoff when the answer has no Retry-After, in ms; default 30,000. */
  retryMaxMs?: number;
  /** Called before each retry (for logs and metrics). */
  onRetry?: (info: RetryInfo) => void;
  /** The fetch to use; default the global one (Node 20's). */
  fetch?: typeof fetch;
}

/** What onRetry is told. */
export interface RetryInfo {
  method: string;
  path: string;
  /** 1 for the first retry. */
  attempt: number;
  /** How long the client waits before it, in ms. */
  delayMs: number;
  /** The refusal being retried. */
  error: ApiError;
}

/** Per-call options. */
export interface CallOptions {
  /** Aborts the call. */
  signal?: AbortSignal;
}

/** Options of Client.submit and Client.get. */
export interface SubmitOptions extends CallOptions {
  /** Wait up to this many seconds for the job to end (the server caps it, --max-wait, 1 min). */
  waitSeconds?: number;
}

/** Options of Client.wait and Client.run. */
export interface WaitOptions extends CallOptions {
  /** Give up after this many ms (WaitTimeout; the job goes on); default never. */
  timeoutMs?: number;
  /** The longest single long-poll, in seconds; default 55. */
  pollSeconds?: number;
}

/** Options of Client.events. */
export interface EventsOptions extends CallOptions {
  /** Resume after this output event's id. */
  lastEventId?: string;
  /** Reconnects in a row without a new event before giving up; default 10. */
  maxReconnects?: number;
}

/** Options of Client.judge. */
export interface JudgeOptions extends WaitOptions, Omit<JudgeSpec, "checker"> {
  checker?: Checker;
  limits?: Limits;
  /** Other job fields (id, tags, ...). */
  job?: Partial<Job>;
}

/** A job's output, exact bytes, and its final view. */
export interface JobOutput {
  stdout: Uint8Array;
  stderr: Uint8Array;
  result: JobView;
}

interface RequestOptions extends CallOptions {
  body?: unknown;
  raw?: Uint8Array | string;
  query?: Record<string, string | undefined>;
  headers?: Record<string, string>;
  /** ms; null: none (streams). Default: the client's timeoutMs. */
  timeoutMs?: number | null;
  redirect?: "follow" | "manual" | "error";
}

const encoder = new TextEncoder();

/** The exact bytes of a stdout/stderr field or output event: text, or base64 when encoding says so. */
export function outputBytes(data: string, encoding?: Encoding | string): Uint8Array {
  if (encoding === "base64") {
    const bin = atob(data);
    const out = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  }
  return encoder.encode(data);
}

function base64(data: Uint8Array | string): string {
  const b = typeof data === "string" ? encoder.encode(data) : data;
  let bin = "";
  for (let i = 0; i < b.length; i += 0x8000) bin += String.fromCharCode(...b.subarray(i, i + 0x8000));
  return btoa(bin);
}

function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/**
 * Parses a Retry-After header, delay-seconds or an HTTP date, into ms;
 * undefined when absent or unreadable.
 */
export function parseRetryAfter(value: string | null | undefined, now = Date.now()): number | undefined {
  if (!value) return undefined;
  const v = value.trim();
  if (/^[0-9]+$/.test(v)) return Number(v) * 1000;
  const t = Date.parse(v);
  return Number.isNaN(t) ? undefined : Math.max(0, t - now);
}

/**
 * Whether a refused request is retried: every 429 (a rate or quota; the
 * API refused it before doing anything), and a 503 that says when to try
 * again (Retry-After: no worker had a session slot) or answers a request
 * that is safe to repeat (GET, PUT, DELETE). A 503 without Retry-After to
 * a POST is not retried: the work may have been done.
 */
export function retryable(status: number, method: string, retryAfterMs: number | undefined): boolean {
  if (status === 429) return true;
  if (status === 503) return retryAfterMs !== undefined || ["GET", "HEAD", "PUT", "DELETE"].includes(method);
  return false;
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

const esc = encodeURIComponent;

/**
 * A client of sandq's HTTP API. It keeps no per-request state: one
 * Client serves any number of concurrent calls.
 *
 *     const c = new Client({ url: "http://127.0.0.1:8080", apiKey: "sqk_..." });
 *     const r = await c.run({ lang: "python", code: "print(6 * 7)" });
 *     console.log(r.status, r.stdout);
 *
 * Errors are ApiError with the RFC 9457 problem the API sent (SessionEnded
 * for 410). Requests answered 429 or 503 are retried (see retryable), after
 * Retry-After when the answer has one, else with exponential backoff.
 */
export class Client {
  readonly url: string;
  readonly apiKey: string | undefined;
  readonly timeoutMs: number;
  readonly maxRetries: number;
  readonly retryBaseMs: number;
  readonly retryMaxMs: number;
  private readonly onRetry: ((info: RetryInfo) => void) | undefined;
  private readonly fetchImpl: typeof fetch;

  constructor(opts: ClientOptions = {}) {
    this.url = (opts.url ?? "http://127.0.0.1:8080").replace(/\/+$/, "");
    this.apiKey = opts.apiKey;
    this.timeoutMs = opts.timeoutMs ?? 90_000;
    this.maxRetries = opts.maxRetries ?? 5;
    this.retryBaseMs = opts.retryBaseMs ?? 500;
    this.retryMaxMs = opts.retryMaxMs ?? 30_000;
    this.onRetry = opts.onRetry;
    this.fetchImpl = opts.fetch ?? globalThis.fetch.bind(globalThis);
  }

  // -- plumbing ----------------------------------------------------------

  /** The backoff before retry number attempt (1, 2, ...) when the answer had no Retry-After. */
  private backoff(attempt: number): number {
    const cap = Math.min(this.retryMaxMs, this.retryBaseMs * 2 ** (attempt - 1));
    return Math.round(cap / 2 + (Math.random() * cap) / 2);
  }

  /** Sends a request, retrying refusals; returns the response of a success (2xx, or 3xx with redirect "manual"). */
  private async request(method: string, path: string, o: RequestOptions = {}): Promise<Response> {
    const q = Object.entries(o.query ?? {}).filter(([, v]) => v !== undefined && v !== "");
    const url = this.url + path + (q.length ? "?" + new URLSearchParams(q as [string, string][]).toString() : "");
    const headers: Record<string, string> = { Accept: "application/json", ...o.headers };
    if (this.apiKey) headers["Authorization"] = "Bearer " + this.apiKey;
    let body: string | Uint8Array | undefined;
    if (o.raw !== undefined) {
      body = o.raw;
      headers["Content-Type"] ??= "application/octet-stream";
    } else if (o.body !== undefined) {
      body = JSON.stringify(o.body);
      headers["Content-Type"] = "application/json";
    }
    for (let attempt = 0; ; attempt++) {
      const limit = o.timeoutMs === undefined ? this.timeoutMs : o.timeoutMs;
      const signals = [o.signal, limit === null ? undefined : AbortSignal.timeout(limit)].filter(
        (s): s is AbortSignal => s !== undefined,
      );
      const init: RequestInit = { method, headers, redirect: o.redirect ?? "follow" };
      if (body !== undefined) init.body = body;
      if (signals.length) init.signal = signals.length === 1 ? signals[0]! : AbortSignal.any(signals);
      const res = await this.fetchImpl(url, init);
      if (res.ok || (o.redirect === "manual" && res.status >= 300 && res.status < 400)) return res;
      const err = await errorOf(res);
      if (attempt < this.maxRetries && retryable(res.status, method, err.retryAfterMs)) {
        const delayMs = err.retryAfterMs ?? this.backoff(attempt + 1);
        this.onRetry?.({ method, path, attempt: attempt + 1, delayMs, error: err });
        await sleep(delayMs, o.signal);
        continue;
      }
      throw err;
    }
  }

  private async json<T>(method: string, path: string, o: RequestOptions = {}): Promise<T> {
    const res = await this.request(method, path, o);
    const text = await res.text();
    return (text ? JSON.parse(text) : undefined) as T;
  }

  private async bytes(method: string, path: string, o: RequestOptions = {}): Promise<Uint8Array> {
    const res = await this.request(method, path, o);
    return new Uint8Array(await res.arrayBuffer());
  }

  // -- jobs --------------------------------------------------------------

  /**
   * Enqueues a job. With waitSeconds, the answer is the final result if
   * the job ended in time; else the job's view so far (queued or running).
   */
  submit(job: Job, o: SubmitOptions = {}): Promise<JobView> {
    const wait = o.waitSeconds ? Math.ceil(o.waitSeconds) : 0;
    return this.json<JobView>("POST", "/v1/jobs", {
      body: job,
      query: { wait: wait ? `${wait}s` : undefined },
      timeoutMs: wait * 1000 + this.timeoutMs,
      ...(o.signal ? { signal: o.signal } : {}),
    });
  }

  /** The job's view; with waitSeconds, a long-poll for its end. */
  get(id: string, o: SubmitOptions = {}): Promise<JobView> {
    const wait = o.waitSeconds ? Math.ceil(o.waitSeconds) : 0;
    return this.json<JobView>("GET", "/v1/jobs/" + esc(id), {
      query: { wait: wait ? `${wait}s` : undefined },
      timeoutMs: wait * 1000 + this.timeoutMs,
      ...(o.signal ? { signal: o.signal } : {}),
    });
  }

  /** Blocks until the job ends (long-polls) and returns its final result; WaitTimeout past timeoutMs. */
  async wait(id: string, o: WaitOptions = {}): Promise<JobView> {
    const poll = o.pollSeconds ?? 55;
    const deadline = o.timeoutMs === undefined ? undefined : Date.now() + o.timeoutMs;
    for (;;) {
      const left = deadline === undefined ? poll : Math.max(1, Math.min(poll, Math.ceil((deadline - Date.now()) / 1000)));
      const view = await this.get(id, { waitSeconds: left, ...(o.signal ? { signal: o.signal } : {}) });
      if (isFinal(view.status)) return view;
      if (deadline !== undefined && Date.now() >= deadline) throw new WaitTimeout(id, view.status);
    }
  }

  /** Submits a job and waits for its final result. */
  async run(job: Job, o: WaitOptions = {}): Promise<JobView> {
    const first = Math.min(55, o.timeoutMs === undefined ? 55 : Math.max(1, Math.ceil(o.timeoutMs / 1000)));
    const started = Date.now();
    const view = await this.submit(job, { waitSeconds: first, ...(o.signal ? { signal: o.signal } : {}) });
    if (isFinal(view.status)) return view;
    const rest: WaitOptions = { ...o };
    if (o.timeoutMs !== undefined) rest.timeoutMs = Math.max(0, o.timeoutMs - (Date.now() - started));
    return this.wait(view.id, rest);
  }

  /**
   * Judges a program by standard input and expected output: compiled once,
   * run once per test case; the final result's verdict is "accepted" when
   * every case is (cases has each case's verdict, score the share
   * accepted). limits.cpu_ms bounds each case's CPU time.
   */
  judge(lang: string, code: string, tests: TestCase[], o: JudgeOptions = {}): Promise<JobView> {
    const { compare, abs_tol, rel_tol, checker, stop_on_first_failure, limits, job, ...wait } = o;
    const spec: JudgeSpec = {};
    if (compare !== undefined) spec.compare = compare;
    if (abs_tol !== undefined) spec.abs_tol = abs_tol;
    if (rel_tol !== undefined) spec.rel_tol = rel_tol;
    if (checker !== undefined) spec.checker = checker;
    if (stop_on_first_failure !== undefined) spec.stop_on_first_failure = stop_on_first_failure;
    const body: Job = { ...job, lang, code, tests };
    if (Object.keys(spec).length) body.judge = spec;
    if (limits) body.limits = limits;
    return this.run(body, wait);
  }

  /** Cancels a job: a queued one ends canceled at once, a running one is killed. ApiError 409 if it has ended. */
  cancel(id: string, o: CallOptions = {}): Promise<JobView> {
    return this.json<JobView>("POST", "/v1/jobs/" + esc(id) + "/cancel", o.signal ? { signal: o.signal } : {});
  }

  /**
   * Follows a job: its Server-Sent Events, status changes, output chunks
   * (live for a job submitted with stream: true) and last its result.
   * A dropped connection is resumed with Last-Event-ID, so no output is
   * repeated or lost.
   */
  async *events(id: string, o: EventsOptions = {}): AsyncGenerator<JobEvent> {
    let last = o.lastEventId;
    let failures = 0;
    const maxReconnects = o.maxReconnects ?? 10;
    for (;;) {
      const headers: Record<string, string> = { Accept: "text/event-stream" };
      if (last) headers["Last-Event-ID"] = last;
      let progressed = false;
      try {
        const res = await this.request("GET", "/v1/jobs/" + esc(id) + "/events", {
          headers,
          timeoutMs: null,
          ...(o.signal ? { signal: o.signal } : {}),
        });
        if (!res.body) throw new TypeError("an event stream without a body");
        for await (const msg of parseSse(res.body as unknown as AsyncIterable<Uint8Array>)) {
          if (msg.event !== "status" && msg.event !== "output" && msg.event !== "result") continue;
          const ev = { event: msg.event, data: JSON.parse(msg.data) } as JobEvent;
          if (msg.id !== undefined) {
            ev.id = msg.id;
            last = msg.id;
          }
          progressed = true;
          failures = 0;
          yield ev;
          if (ev.event === "result") return;
        }
      } catch (err) {
        // An API error (404, 401, ...) or an abort ends the stream; a
        // dropped connection is resumed.
        if (err instanceof ApiError || o.signal?.aborted) throw err;
        if (!progressed && ++failures > maxReconnects) throw err;
      }
      await sleep(200, o.signal);
    }
  }

  /** Follows a job's output to its end: stdout and stderr of its run step, exact bytes, and the final view. */
  async output(id: string, o: EventsOptions = {}): Promise<JobOutput> {
    const out: Uint8Array[] = [];
    const err: Uint8Array[] = [];
    for await (const ev of this.events(id, o)) {
      if (ev.event === "output" && ev.data.step === "run") {
        (ev.data.stream === "stdout" ? out : err).push(outputBytes(ev.data.data, ev.data.encoding));
      } else if (ev.event === "result") {
        return { stdout: concat(out), stderr: concat(err), result: ev.data };
      }
    }
    throw new Error(`the events of job ${id} ended without a result`);
  }

  // -- artifacts ---------------------------------------------------------

  /** The job's artifacts: plots, output files, output streams moved out of a large result. */
  async artifacts(id: string, o: CallOptions = {}): Promise<ArtifactView[]> {
    const body = await this.json<{ artifacts: ArtifactView[] | null }>("GET", "/v1/jobs/" + esc(id) + "/artifacts", o);
    return body.artifacts ?? [];
  }

  /**
   * An artifact's bytes. The API answers a redirect to the store's
   * presigned URL, or the file itself; the redirect is followed without
   * the API key.
   */
  async download(id: string, name: string, o: CallOptions = {}): Promise<Uint8Array> {
    const path = "/v1/jobs/" + esc(id) + "/artifacts/" + esc(name);
    const res = await this.request("GET", path, { ...o, redirect: "manual", headers: { Accept: "*/*" } });
    if (res.status < 300) return new Uint8Array(await res.arrayBuffer());
    await res.body?.cancel();
    const loc = res.headers.get("Location");
    if (!loc) throw new ApiError(res.status, { status: res.status, detail: "a redirect without a Location" });
    const signals = [o.signal, AbortSignal.timeout(this.timeoutMs)].filter((s): s is AbortSignal => s !== undefined);
    const store = await this.fetchImpl(new URL(loc, this.url + path), { signal: AbortSignal.any(signals) });
    if (!store.ok) throw await errorOf(store);
    return new Uint8Array(await store.arrayBuffer());
  }

  // -- batches -----------------------------------------------------------

  /** Enqueues many jobs at once; each is checked on its own (see BatchItem.error). */
  batch(jobs: Job[], o: CallOptions & { id?: string } = {}): Promise<Batch> {
    return this.json<Batch>("POST", "/v1/batches", {
      body: jobs,
      query: { id: o.id },
      ...(o.signal ? { signal: o.signal } : {}),
    });
  }

  /** A batch's progress: total, done, counts per status. */
  batchProgress(id: string, o: CallOptions = {}): Promise<BatchProgress> {
    return this.json<BatchProgress>("GET", "/v1/batches/" + esc(id), o);
  }

  /** The batch's final results, as its jobs finish (those already final first). */
  async *batchResults(id: string, o: CallOptions = {}): AsyncGenerator<JobView> {
    const res = await this.request("GET", "/v1/batches/" + esc(id) + "/results", {
      headers: { Accept: "application/x-ndjson" },
      timeoutMs: null,
      ...(o.signal ? { signal: o.signal } : {}),
    });
    if (!res.body) return;
    const decoder = new TextDecoder();
    let buf = "";
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      buf += decoder.decode(chunk, { stream: true });
      let nl: number;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl).trim();
        buf = buf.slice(nl + 1);
        if (line) yield JSON.parse(line) as JobView;
      }
    }
    buf += decoder.decode();
    if (buf.trim()) yield JSON.parse(buf) as JobView;
  }

  // -- sessions ----------------------------------------------------------

  /**
   * Opens a session: a live interpreter in one container, run cell by
   * cell, its state kept from cell to cell. Returns once it is ready
   * (minutes with libraries). A 503 (no worker has a free session slot)
   * is retried after its Retry-After.
   */
  async openSession(lang: string, spec: SessionSpec = {}, o: CallOptions = {}): Promise<SessionHandle> {
    const body: Record<string, unknown> = { ...spec, lang };
    if (spec.files) {
      body.files = spec.files.map((f) => {
        if (!("data" in f)) return f;
        const { data, ...rest } = f;
        return { ...rest, content_b64: base64(data) };
      });
    }
    const wait = spec.libraries?.length ? 900_000 : 150_000;
    const info = await this.json<Session>("POST", "/v1/sessions", {
      body,
      timeoutMs: wait + this.timeoutMs,
      ...(o.signal ? { signal: o.signal } : {}),
    });
    return new SessionHandle(this, info);
  }

  /** Opens a session, runs fn with it, and closes it however fn ends. */
  async withSession<T>(lang: string, spec: SessionSpec, fn: (s: SessionHandle) => Promise<T>): Promise<T> {
    const s = await this.openSession(lang, spec);
    try {
      return await fn(s);
    } finally {
      await s.close().catch(() => undefined);
    }
  }

  /** A handle on an existing session of this key's tenant. */
  async session(id: string, o: CallOptions = {}): Promise<SessionHandle> {
    return new SessionHandle(this, await this.json<Session>("GET", "/v1/sessions/" + esc(id), o));
  }

  /** The tenant's sessions, newest first. */
  async sessions(o: CallOptions = {}): Promise<Session[]> {
    return (await this.json<{ sessions: Session[] | null }>("GET", "/v1/sessions", o)).sessions ?? [];
  }

  // -- misc --------------------------------------------------------------

  /** The languages the workers run. */
  async languages(o: CallOptions = {}): Promise<Language[]> {
    return (await this.json<Language[] | null>("GET", "/v1/languages", o)) ?? [];
  }

  /** This key's webhook signing secret. */
  async webhookSecret(o: CallOptions = {}): Promise<string> {
    return (await this.json<{ secret: string }>("GET", "/v1/webhook-secret", o)).secret;
  }

  /** See verifyWebhook. */
  static verifyWebhook(secret: string, signatureHeader: string | null | undefined, body: string | Uint8Array, opts?: VerifyOptions): Promise<boolean> {
    return verifyWebhook(secret, signatureHeader, body, opts);
  }

  /** @internal: for SessionHandle. */
  _json<T>(method: string, path: string, o: RequestOptions = {}): Promise<T> {
    return this.json<T>(method, path, o);
  }

  /** @internal: for SessionHandle. */
  _bytes(method: string, path: string, o: RequestOptions = {}): Promise<Uint8Array> {
    return this.bytes(method, path, o);
  }
}

/** Reads an error answer into an ApiError (SessionEnded for 410). */
async function errorOf(res: Response): Promise<ApiError> {
  const text = await res.text().catch(() => "");
  let problem: Problem;
  try {
    const parsed: unknown = JSON.parse(text);
    problem = parsed && typeof parsed === "object" ? (parsed as Problem) : { detail: text };
  } catch {
    problem = { status: res.status, title: res.statusText, detail: text.slice(0, 2000) };
  }
  const after = parseRetryAfter(res.headers.get("Retry-After"));
  return res.status === 410 ? new SessionEnded(res.status, problem, after) : new ApiError(res.status, problem, after);
}

/**
 * One session of a Client (see Client.openSession). Its methods throw
 * SessionEnded once the session has ended, and ApiError 409 while another
 * cell runs (one at a time).
 */
export class SessionHandle {
  readonly id: string;
  /** The session's record as last read. */
  info: Session;

  constructor(
    readonly client: Client,
    info: Session,
  ) {
    this.id = info.id;
    this.info = info;
  }

  private path(suffix = ""): string {
    return "/v1/sessions/" + esc(this.id) + suffix;
  }

  // Slashes escaped: the API takes them so, and no proxy or router cleans
  // ".." out of the path before the API refuses it.
  private filePath(path: string): string {
    return this.path("/files/" + esc(path));
  }

  /**
   * Runs code as a cell and returns its result: status ok, error, timeout,
   * or session_ended (the interpreter died during it); stdout, stderr;
   * results (displayed values as MIME bundles); error. timeoutMs bounds the
   * cell (default: the session's).
   */
  exec(code: string, o: CallOptions & { timeoutMs?: number } = {}): Promise<CellResult> {
    const body: Record<string, unknown> = { code };
    if (o.timeoutMs) body.timeout_ms = Math.round(o.timeoutMs);
    const limit = o.timeoutMs ?? this.info.limits?.timeout_ms ?? 600_000;
    return this.client._json<CellResult>("POST", this.path("/cells"), {
      body,
      timeoutMs: limit + 30_000 + this.client.timeoutMs,
      ...(o.signal ? { signal: o.signal } : {}),
    });
  }

  /** Interrupts the running cell, if any (KeyboardInterrupt in Python). */
  async interrupt(o: CallOptions = {}): Promise<Session> {
    this.info = await this.client._json<Session>("POST", this.path("/interrupt"), o);
    return this.info;
  }

  /** Writes data (at most 16 MiB) to path in the work dir, directories made as needed. */
  async upload(path: string, data: Uint8Array | string, o: CallOptions = {}): Promise<void> {
    await this.client._json<unknown>("PUT", this.filePath(path), {
      raw: typeof data === "string" ? encoder.encode(data) : data,
      ...(o.signal ? { signal: o.signal } : {}),
    });
  }

  /** The bytes of a regular file of the work dir. */
  download(path: string, o: CallOptions = {}): Promise<Uint8Array> {
    return this.client._bytes("GET", this.filePath(path), { headers: { Accept: "*/*" }, ...o });
  }

  /** The files and directories under dir (default: the work dir), recursively. */
  async files(dir = "", o: CallOptions = {}): Promise<FileEntry[]> {
    const body = await this.client._json<{ files: FileEntry[] | null }>("GET", this.path("/files"), {
      query: { dir },
      ...o,
    });
    return body.files ?? [];
  }

  /** Reads the session's record: state, reason, execution_count, times. */
  async refresh(o: CallOptions = {}): Promise<Session> {
    this.info = await this.client._json<Session>("GET", this.path(), o);
    return this.info;
  }

  /** Closes the session (its container is removed); returns its final record. Closing an ended session is not an error. */
  async close(o: CallOptions = {}): Promise<Session> {
    this.info = await this.client._json<Session>("DELETE", this.path(), o);
    return this.info;
  }
}
