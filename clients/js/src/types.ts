// The API's JSON shapes, as its OpenAPI document (/openapi.json) describes
// them. Fields the API leaves out when empty are optional here.

/** A job's status: queued and running are not final; the others are. */
export type JobStatus =
  | "queued"
  | "running"
  | "succeeded"
  | "failed"
  | "compile_error"
  | "timeout"
  | "oom"
  | "output_limit"
  | "rejected"
  | "canceled"
  | "internal_error";

/** The statuses that end a job. */
export const FINAL_STATUSES: readonly JobStatus[] = [
  "succeeded",
  "failed",
  "compile_error",
  "timeout",
  "oom",
  "output_limit",
  "rejected",
  "canceled",
  "internal_error",
];

/** Whether a status is final (the job has ended). */
export function isFinal(status: string): boolean {
  return status !== "queued" && status !== "running";
}

/** A judged job's or test case's verdict. */
export type Verdict =
  | "accepted"
  | "wrong_answer"
  | "time_limit"
  | "memory_limit"
  | "runtime_error"
  | "output_limit"
  | "compile_error"
  | "checker_error"
  | "skipped";

/** base64 when a text field holds the base64 of bytes that are not UTF-8. */
export type Encoding = "base64";

/** A job's resource limits (see docs/jobs.md); the operator's defaults fill what is left out. */
export interface Limits {
  timeout_ms?: number;
  cpu_ms?: number;
  memory_mb?: number;
  cpus?: number;
  pids?: number;
  output_bytes?: number;
  disk_mb?: number;
  tmp_mb?: number;
  nofile?: number;
  file_size_mb?: number;
}

/** An input file of a job or session: its content inline (base64) or from the store (key). */
export interface File {
  path: string;
  content_b64?: string;
  key?: string;
  mode?: number;
}

/** One test case of a judged job. */
export interface TestCase {
  name?: string;
  stdin?: string;
  stdin_key?: string;
  expected_stdout?: string;
}

/** A checker program: run with the files input, output and answer, exit 0 to accept. */
export interface Checker {
  lang: string;
  code: string;
}

/** How a judged job's output is compared with the expected output. */
export interface JudgeSpec {
  compare?: "lines" | "exact" | "tokens" | "float" | string;
  abs_tol?: number;
  rel_tol?: number;
  checker?: Checker;
  stop_on_first_failure?: boolean;
}

/** The hosts a job may reach through the egress proxy (the key needs network:egress). */
export interface NetworkPolicy {
  allow?: string[] | null;
}

/** A job as submitted: the job format of docs/jobs.md, plus callback_url. */
export interface Job {
  lang: string;
  code: string;
  id?: string;
  stdin?: string;
  args?: string[];
  env?: Record<string, string>;
  files?: File[];
  libraries?: string[];
  limits?: Limits;
  output_files?: string[];
  plot_formats?: string[];
  queue?: string;
  isolation?: string;
  environment?: string;
  max_retry?: number;
  /** Live output: follow it with Client.events while the job runs. */
  stream?: boolean;
  tags?: Record<string, string>;
  network?: NetworkPolicy;
  /** Test cases: the job is judged, compiled once and run once per case. */
  tests?: TestCase[];
  judge?: JudgeSpec;
  /** An http(s) URL the final result is POSTed to, signed (see verifyWebhook). */
  callback_url?: string;
}

/** CPU, wall time and memory of a run. */
export interface Usage {
  cpu_ms?: number;
  wall_ms?: number;
  max_rss_kb?: number;
  prestarted?: boolean;
}

/** A compile or install step's outcome. */
export interface StepResult {
  exit_code?: number;
  signal?: string;
  stdout: string;
  stderr: string;
  stdout_encoding?: Encoding;
  stderr_encoding?: Encoding;
  stdout_truncated?: boolean;
  stderr_truncated?: boolean;
  stdout_total_bytes?: number;
  stderr_total_bytes?: number;
  stdout_artifact?: string;
  stderr_artifact?: string;
  usage?: Usage;
  /** A judged job's compile reused from the worker's compile cache. */
  cached?: boolean;
}

/** The libraries' install. */
export interface InstallResult {
  cached: boolean;
  took_ms: number;
  volume?: string;
  step?: StepResult;
}

/** One test case's outcome in a judged job. */
export interface CaseResult {
  name?: string;
  verdict: Verdict;
  cpu_ms: number;
  wall_ms: number;
  max_rss_kb?: number;
  exit_code?: number;
  signal?: string;
  stdout?: string;
  stderr?: string;
  expected?: string;
  checker?: string;
  detail?: string;
  rerun?: boolean;
}

/** A file a job left: a plot, an output file, or an output stream moved out of a large result. */
export interface Artifact {
  name: string;
  kind: "plot" | "file" | "output" | string;
  size: number;
  content_type?: string;
  key?: string;
  url?: string;
}

/** An artifact as GET /v1/jobs/{id}/artifacts lists it: url is the API path to download it. */
export interface ArtifactView {
  name: string;
  kind: "plot" | "file" | "output";
  size: number;
  content_type?: string;
  url: string;
}

/** One destination a job's run reached (or was refused) through the egress proxy. */
export interface NetworkUse {
  host: string;
  port: number;
  connections: number;
  bytes_out: number;
  bytes_in: number;
  refused?: boolean;
  failed?: number;
  reason?: string;
}

/** Where and how a job ran. */
export interface Provenance {
  worker?: string;
  image?: string;
  toolchain?: string;
  /** The environment as the job named it; recipe, the hash of the recipe its image was built from. */
  environment?: string;
  recipe?: string;
  cpu_model?: string;
  cpus: number;
  cpu_shared: boolean;
  load1: number;
  limits: Limits;
}

/** The delivery of a job's webhook. */
export interface WebhookStatus {
  url: string;
  state: "pending" | "delivered" | "failed";
  attempts: number;
  last_status_code?: number;
  last_error?: string;
  delivered_at?: string;
}

/**
 * A job's result: while it runs, its status (queued or running) and what is
 * known; once final, its output, exit code, usage, artifacts, and for a
 * judged job its verdict, cases and score. stdout/stderr are UTF-8 text,
 * or base64 when *_encoding says so (see outputBytes).
 */
export interface Result {
  id: string;
  status: JobStatus;
  reason?: string;
  lang?: string;
  queue?: string;
  tenant?: string;
  worker?: string;
  attempts?: number;
  exit_code?: number;
  signal?: string;
  stdout: string;
  stderr: string;
  stdout_encoding?: Encoding;
  stderr_encoding?: Encoding;
  stdout_truncated?: boolean;
  stderr_truncated?: boolean;
  stdout_total_bytes?: number;
  stderr_total_bytes?: number;
  stdout_artifact?: string;
  stderr_artifact?: string;
  compile?: StepResult;
  install?: InstallResult;
  usage?: Usage;
  artifacts?: Artifact[] | null;
  artifact_errors?: string[] | null;
  dropped_artifacts?: string[] | null;
  network?: NetworkUse[] | null;
  provenance?: Provenance;
  tags?: Record<string, string>;
  enqueued_at?: string;
  started_at?: string;
  finished_at?: string;
  /** A judged job's verdict: accepted when every case is. */
  verdict?: Verdict;
  /** A judged job's cases, in order. */
  cases?: CaseResult[] | null;
  /** A judged job's share of accepted cases, 0 to 1. */
  score?: number;
}

/** A job as the API shows it: its Result and its webhook's delivery. */
export interface JobView extends Result {
  webhook?: WebhookStatus;
}

/** The data of a "status" event. */
export interface StatusEvent {
  status: JobStatus;
}

/** The data of an "output" event: a chunk of a step's stream. */
export interface OutputEvent {
  step: "compile" | "run" | string;
  stream: "stdout" | "stderr";
  offset: number;
  /** The chunk: text, or base64 when encoding is "base64" (see outputBytes). */
  data: string;
  encoding?: Encoding;
  dropped?: number;
  limit?: boolean;
  attempt?: number;
  from_result?: boolean;
}

/** One Server-Sent Event of GET /v1/jobs/{id}/events. */
export type JobEvent =
  | { event: "status"; data: StatusEvent; id?: string }
  | { event: "output"; data: OutputEvent; id?: string }
  | { event: "result"; data: JobView; id?: string };

/** An item's error in a batch. */
export interface ItemError {
  status: number;
  detail: string;
  errors?: ProblemDetail[] | null;
}

/** One job of a created batch: its ID and status, or its error. */
export interface BatchItem {
  index: number;
  id?: string;
  status?: JobStatus;
  error?: ItemError;
}

/** The answer to POST /v1/batches. */
export interface Batch {
  id: string;
  total: number;
  enqueued: number;
  items: BatchItem[] | null;
}

/** A batch's progress. */
export interface BatchProgress {
  id: string;
  total: number;
  done: number;
  counts: Record<string, number>;
  created: string;
}

/** A session's state: starting and ready are live; the others ended it. */
export type SessionState = "starting" | "ready" | "closed" | "expired" | "lost" | "oom";

/** What POST /v1/sessions takes, lang aside. */
export interface SessionSpec {
  id?: string;
  limits?: Limits;
  libraries?: string[];
  /** Files: content_b64, or data (bytes or text) which the client encodes. */
  files?: (File | { path: string; data: Uint8Array | string; mode?: number })[];
  env?: Record<string, string>;
  environment?: string;
  network?: NetworkPolicy;
  idle_ttl_seconds?: number;
  lifetime_seconds?: number;
}

/** A session's record. */
export interface Session {
  id: string;
  lang: string;
  state: SessionState;
  reason?: string;
  tenant?: string;
  worker?: string;
  limits?: Limits;
  execution_count: number;
  idle_ttl_seconds: number;
  created_at: string;
  expires_at: string;
  last_used_at?: string;
  ended_at?: string;
}

/** A cell's error. */
export interface CellError {
  name: string;
  value: string;
  traceback?: string[] | null;
}

/** A cell's outcome. */
export interface CellResult {
  id: string;
  session: string;
  status: "ok" | "error" | "timeout" | "session_ended";
  stdout: string;
  stderr: string;
  stdout_truncated?: boolean;
  stderr_truncated?: boolean;
  /** Displayed values as MIME bundles: type to content (binary types in base64). */
  results?: Record<string, string>[] | null;
  error?: CellError;
  execution_count?: number;
  reason?: string;
  artifacts?: Artifact[] | null;
  usage: Usage;
}

/** A file or directory of a session's work dir. */
export interface FileEntry {
  path: string;
  size: number;
  dir?: boolean;
  mode: number;
  mod_time: string;
}

/** A language the workers run. */
export interface Language {
  name: string;
  aliases?: string[] | null;
  image?: string;
  libraries?: string;
  version?: string;
}

/** One offending input of an RFC 9457 problem. */
export interface ProblemDetail {
  location?: string;
  message?: string;
  value?: unknown;
}

/** An RFC 9457 problem, as the API answers errors. */
export interface Problem {
  type?: string;
  title?: string;
  status?: number;
  detail?: string;
  instance?: string;
  errors?: ProblemDetail[] | null;
}
