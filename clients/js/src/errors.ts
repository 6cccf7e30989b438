import type { Problem, ProblemDetail } from "./types.js";

/**
 * An error answer of the API, carrying the RFC 9457 problem it sent:
 * status, title, detail and errors (each with a location such as
 * "body.limits.memory_mb", a message and the offending value).
 */
export class ApiError extends Error {
  override name = "ApiError";
  /** The HTTP status. */
  readonly status: number;
  /** The problem as the API sent it (or one made from a body that was not a problem). */
  readonly problem: Problem;
  /** The problem's errors; [] when it had none. */
  readonly errors: ProblemDetail[];
  /** Retry-After, in milliseconds, when the answer had one (429, some 503s). */
  readonly retryAfterMs: number | undefined;

  constructor(status: number, problem: Problem, retryAfterMs?: number) {
    const detail = problem.detail || problem.title || "";
    const errors = problem.errors ?? [];
    const where = errors.map((e) => `${e.location ?? ""}: ${e.message ?? ""}`).join("; ");
    super(`${status}: ${detail}${where ? ` (${where})` : ""}`);
    this.status = status;
    this.problem = problem;
    this.errors = errors;
    this.retryAfterMs = retryAfterMs;
  }

  /** The problem's detail (or its title). */
  get detail(): string {
    return this.problem.detail || this.problem.title || "";
  }

  /** The quota a 429 names ("rate", "jobs", "bytes", "sessions", ...), if any. */
  get quota(): string | undefined {
    const q = this.errors.find((e) => e.location === "quota");
    return typeof q?.value === "string" ? q.value : undefined;
  }
}

/**
 * 410: the session has ended. state is closed, expired, lost or oom;
 * reason says why.
 */
export class SessionEnded extends ApiError {
  override name = "SessionEnded";
  readonly state: string;
  readonly reason: string;

  constructor(status: number, problem: Problem, retryAfterMs?: number) {
    super(status, problem, retryAfterMs);
    const first = this.errors[0];
    this.state = typeof first?.value === "string" ? first.value : "";
    this.reason = first?.message ?? "";
  }
}

/** A wait for a job ran out before the job ended (the job goes on). */
export class WaitTimeout extends Error {
  override name = "WaitTimeout";
  constructor(
    readonly jobId: string,
    readonly status: string,
  ) {
    super(`job ${jobId} is still ${status}`);
  }
}
