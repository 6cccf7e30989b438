"""What the sync and asyncio clients share: requests as data, answers
decoded into typed results, retries, the SSE parser.

Each operation is a generator ("op") that yields a Request and is sent
the Response, or yields a Sleep; the sync client drives it with
http.client and time.sleep, the asyncio client with asyncio streams and
asyncio.sleep. So both clients do exactly the same requests.
"""

from __future__ import annotations

import email.utils
import json
import os
import random
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Callable, Generator, Iterable, Mapping, Sequence, TypeVar, Union

from . import _types as t
from ._errors import ApiError, error_for
from .evals import EvalReport, summarize

__version__ = "0.1.0"

R = TypeVar("R")

JobLike = Union[t.Job, Mapping[str, Any]]


@dataclass
class Request:
    method: str
    path: str  # with its query
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    timeout: float | None = None  # None: the client's
    # Redirects (an artifact in S3) are followed; the key is only sent to
    # the API's own origin.
    follow_redirects: bool = False


@dataclass
class Response:
    status: int
    headers: dict[str, str]  # lower-case names
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


@dataclass
class Sleep:
    seconds: float


Op = Generator[Union[Request, Sleep], Union[Response, None], R]


def quote(s: str) -> str:
    """A path segment, slashes escaped."""
    return urllib.parse.quote(s, safe="")


def job_dict(job: JobLike) -> dict[str, Any]:
    if isinstance(job, t.Job):
        return job.to_dict()
    d = dict(job)
    files = d.get("files")
    if files:
        d["files"] = [f.to_dict() if isinstance(f, t.File) else dict(f) for f in files]
    return t._to_dict(d)  # type: ignore[no-any-return]


def parse_retry_after(v: str | None) -> float | None:
    """Retry-After in seconds: delta-seconds or an HTTP date."""
    if not v:
        return None
    v = v.strip()
    if v.isdigit():
        return float(v)
    try:
        when = email.utils.parsedate_to_datetime(v)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def check(resp: Response) -> Response:
    """resp, or its problem raised as an ApiError."""
    if resp.status < 400:
        return resp
    try:
        problem = json.loads(resp.body) if resp.body else {}
        if not isinstance(problem, dict):
            problem = {"detail": str(problem)}
    except ValueError:
        problem = {"detail": resp.body.decode("utf-8", "replace")[:1000]}
    raise error_for(resp.status, problem, parse_retry_after(resp.headers.get("retry-after")))


RETRY_STATUSES = frozenset({429, 503})


@dataclass
class Retry:
    """Retries of requests answered 429 or 503 (refused before anything
    was done): at most retries more attempts, each after the answer's
    Retry-After (capped at max_retry_after) or, without one, after an
    exponential backoff from backoff seconds up to max_backoff, with
    jitter. on_retry(attempt, error, delay) is called before each wait."""
    retries: int = 5
    backoff: float = 0.5
    max_backoff: float = 30.0
    max_retry_after: float = 120.0
    on_retry: Callable[[int, ApiError, float], None] | None = None

    def delay(self, attempt: int, err: ApiError) -> float | None:
        """Seconds to wait before attempt (1-based), or None to give up."""
        if err.status not in RETRY_STATUSES or attempt > self.retries:
            return None
        if err.retry_after is not None:
            if err.retry_after > self.max_retry_after:
                return None
            d = err.retry_after + random.uniform(0, min(1.0, 0.1 * err.retry_after + 0.05))
        else:
            d = random.uniform(0.5, 1.0) * min(self.max_backoff, self.backoff * 2 ** (attempt - 1))
        if self.on_retry is not None:
            self.on_retry(attempt, err, d)
        return d


class SSEParser:
    """Server-Sent Events, line by line (without line endings)."""

    def __init__(self) -> None:
        self.event = ""
        self.data: list[str] = []
        self.id: str | None = None

    def line(self, line: str) -> tuple[str, str, str | None] | None:
        """Feeds a line; returns (event, data, id) when one is complete."""
        if line == "":
            out = (self.event or "message", "\n".join(self.data), self.id) if self.data else None
            self.event, self.data, self.id = "", [], None
            return out
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            self.event = value
        elif name == "data":
            self.data.append(value)
        elif name == "id":
            self.id = value
        return None


def event(name: str, data: str, ident: str | None) -> t.Event | None:
    """A job event from an SSE message; None for one this client does not know."""
    payload = json.loads(data)
    if name == "status":
        return t.StatusEvent.from_dict(payload)
    if name == "output":
        ev = t.OutputEvent.from_dict(payload)
        ev.id = ident
        return ev
    if name == "result":
        return t.ResultEvent(t.Result.from_dict(payload))
    return None


class Base:
    """Configuration and the operations both clients share."""

    def __init__(self, url: str | None = None, api_key: str | None = None, *, timeout: float = 90.0,
                 retry: Retry | None = None, user_agent: str | None = None) -> None:
        self.url = (url or os.environ.get("SANDQ_API_URL") or "http://127.0.0.1:8080").rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("SANDQ_API_KEY")
        self.timeout = timeout
        self.retry = retry if retry is not None else Retry()
        self.user_agent = user_agent or f"sandq-python/{__version__}"
        parts = urllib.parse.urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"sandq: not an http(s) URL: {self.url!r}")
        self._scheme, self._host = parts.scheme, parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._base_path = parts.path.rstrip("/")

    # -- plumbing -------------------------------------------------------------

    def _headers(self, extra: Mapping[str, str] | None = None, content_type: str | None = None) -> dict[str, str]:
        h = {"Accept": "application/json", "User-Agent": self.user_agent}
        if self.api_key:
            h["Authorization"] = "Bearer " + self.api_key
        if content_type:
            h["Content-Type"] = content_type
        h.update(extra or {})
        return h

    def _req(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
             content_type: str | None = None, headers: Mapping[str, str] | None = None,
             timeout: float | None = None, follow_redirects: bool = False) -> Request:
        data = raw
        if body is not None:
            data, content_type = json.dumps(body).encode("utf-8"), "application/json"
        return Request(method, self._base_path + path, data, self._headers(headers, content_type), timeout, follow_redirects)

    def _call(self, req: Request) -> Op[Any]:
        """Sends req; the decoded JSON answer."""
        resp = yield req
        assert resp is not None
        return check(resp).json()

    @staticmethod
    def _wait_q(wait: float | None) -> str:
        return f"?wait={max(1, int(wait))}s" if wait else ""

    # -- jobs -----------------------------------------------------------------

    def _op_submit(self, job: JobLike, wait: float | None) -> Op[t.Result]:
        req = self._req("POST", "/v1/jobs" + self._wait_q(wait), job_dict(job), timeout=(wait or 0) + self.timeout)
        return t.Result.from_dict((yield from self._call(req)))

    def _op_get(self, job_id: str, wait: float | None) -> Op[t.Result]:
        req = self._req("GET", "/v1/jobs/" + quote(job_id) + self._wait_q(wait), timeout=(wait or 0) + self.timeout)
        return t.Result.from_dict((yield from self._call(req)))

    def _op_wait(self, job_id: str, timeout: float | None, poll: float) -> Op[t.Result]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = poll if deadline is None else max(1.0, min(poll, deadline - time.monotonic()))
            r = yield from self._op_get(job_id, left)
            if r.final:
                return r
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"sandq: job {job_id} is still {r.status}")

    def _op_run(self, job: JobLike, timeout: float | None) -> Op[t.Result]:
        r = yield from self._op_submit(job, min(55.0, timeout or 55.0))
        if not r.final:
            r = yield from self._op_wait(r.id, timeout, 55.0)
        return r

    @staticmethod
    def _judged(lang: str, code: str, tests: Iterable[t.TestCase | Mapping[str, Any]], compare: str | None,
                checker: t.Checker | Mapping[str, str] | None, stop_on_first_failure: bool | None,
                limits: t.Limits | Mapping[str, Any] | None, fields: Mapping[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = dict(fields, lang=lang, code=code,
                                    tests=[c.to_dict() if isinstance(c, t.TestCase) else dict(c) for c in tests])
        spec: dict[str, Any] = {}
        if compare is not None:
            spec["compare"] = compare
        if checker is not None:
            spec["checker"] = checker.to_dict() if isinstance(checker, t.Checker) else dict(checker)
        if stop_on_first_failure is not None:
            spec["stop_on_first_failure"] = stop_on_first_failure
        if spec:
            body["judge"] = spec
        if limits is not None:
            body["limits"] = limits.to_dict() if isinstance(limits, t.Limits) else dict(limits)
        return body

    def _op_cancel(self, job_id: str) -> Op[t.Result]:
        return t.Result.from_dict((yield from self._call(self._req("POST", "/v1/jobs/" + quote(job_id) + "/cancel"))))

    def _events_req(self, job_id: str, last_event_id: str | None) -> Request:
        h = {"Accept": "text/event-stream"}
        if last_event_id:
            h["Last-Event-ID"] = last_event_id
        return self._req("GET", "/v1/jobs/" + quote(job_id) + "/events", headers=h)

    # -- artifacts -------------------------------------------------------------

    def _op_artifacts(self, job_id: str) -> Op[list[t.Artifact]]:
        body = yield from self._call(self._req("GET", "/v1/jobs/" + quote(job_id) + "/artifacts"))
        return [t.Artifact.from_dict(a) for a in (body or {}).get("artifacts") or []]

    def _op_download(self, job_id: str, name: str) -> Op[bytes]:
        req = self._req("GET", "/v1/jobs/" + quote(job_id) + "/artifacts/" + quote(name), follow_redirects=True)
        req.headers["Accept"] = "*/*"
        resp = yield req
        assert resp is not None
        return check(resp).body

    # -- batches ---------------------------------------------------------------

    def _op_batch(self, jobs: Iterable[JobLike], batch_id: str | None) -> Op[t.Batch]:
        q = "?id=" + quote(batch_id) if batch_id else ""
        lines = b"".join(json.dumps(job_dict(j)).encode("utf-8") + b"\n" for j in jobs)
        req = self._req("POST", "/v1/batches" + q, raw=lines, content_type="application/x-ndjson")
        return t.Batch.from_dict((yield from self._call(req)))

    def _op_batch_progress(self, batch_id: str) -> Op[t.BatchProgress]:
        return t.BatchProgress.from_dict((yield from self._call(self._req("GET", "/v1/batches/" + quote(batch_id)))))

    def _batch_results_req(self, batch_id: str) -> Request:
        return self._req("GET", "/v1/batches/" + quote(batch_id) + "/results", headers={"Accept": "application/x-ndjson"})

    @staticmethod
    def _eval_jobs(samples: Mapping[str, Sequence[JobLike]], tag: str) -> list[dict[str, Any]]:
        out = []
        for task, jobs in samples.items():
            for i, j in enumerate(jobs):
                d = job_dict(j)
                d["tags"] = dict(d.get("tags") or {}, **{tag: task, tag + "_sample": str(i)})
                out.append(d)
        return out

    @staticmethod
    def _eval_report(batch: t.Batch, results: list[t.Result], ks: Sequence[int], tag: str) -> EvalReport:
        return summarize(batch, results, ks, tag)

    # -- sessions --------------------------------------------------------------

    def _op_open_session(self, spec: dict[str, Any], timeout: float | None) -> Op[t.SessionInfo]:
        wait = timeout if timeout is not None else (900.0 if spec.get("libraries") else 150.0)
        req = self._req("POST", "/v1/sessions", spec, timeout=wait + self.timeout)
        return t.SessionInfo.from_dict((yield from self._call(req)))

    @staticmethod
    def _session_spec(lang: str, limits: t.Limits | Mapping[str, Any] | None, files: Sequence[t.File | Mapping[str, Any]] | None,
                      fields: Mapping[str, Any]) -> dict[str, Any]:
        spec: dict[str, Any] = {k: v for k, v in fields.items() if v is not None}
        spec["lang"] = lang
        if limits is not None:
            spec["limits"] = limits.to_dict() if isinstance(limits, t.Limits) else dict(limits)
        if files:
            spec["files"] = [f.to_dict() if isinstance(f, t.File) else dict(f) for f in files]
        return t._to_dict(spec)  # type: ignore[no-any-return]

    def _op_session_info(self, session_id: str) -> Op[t.SessionInfo]:
        return t.SessionInfo.from_dict((yield from self._call(self._req("GET", "/v1/sessions/" + quote(session_id)))))

    def _op_sessions(self) -> Op[list[t.SessionInfo]]:
        body = yield from self._call(self._req("GET", "/v1/sessions"))
        return [t.SessionInfo.from_dict(s) for s in (body or {}).get("sessions") or []]

    def _op_exec(self, session_id: str, code: str, timeout_ms: int | None, default_ms: int | None) -> Op[t.CellResult]:
        body: dict[str, Any] = {"code": code}
        if timeout_ms:
            body["timeout_ms"] = int(timeout_ms)
        limit = (timeout_ms or default_ms or 600_000) / 1000
        req = self._req("POST", "/v1/sessions/" + quote(session_id) + "/cells", body, timeout=limit + 30 + self.timeout)
        return t.CellResult.from_dict((yield from self._call(req)))

    def _op_interrupt(self, session_id: str) -> Op[t.SessionInfo]:
        return t.SessionInfo.from_dict((yield from self._call(self._req("POST", "/v1/sessions/" + quote(session_id) + "/interrupt"))))

    def _op_upload(self, session_id: str, path: str, data: bytes) -> Op[None]:
        # Slashes escaped: the API takes them so, and no proxy or router
        # cleans ".." out of the path before the API refuses it.
        req = self._req("PUT", "/v1/sessions/" + quote(session_id) + "/files/" + quote(path), raw=bytes(data),
                        content_type="application/octet-stream")
        yield from self._call(req)

    def _op_session_download(self, session_id: str, path: str) -> Op[bytes]:
        req = self._req("GET", "/v1/sessions/" + quote(session_id) + "/files/" + quote(path), headers={"Accept": "*/*"})
        resp = yield req
        assert resp is not None
        return check(resp).body

    def _op_files(self, session_id: str, directory: str) -> Op[list[t.FileEntry]]:
        q = "?dir=" + quote(directory) if directory else ""
        body = yield from self._call(self._req("GET", "/v1/sessions/" + quote(session_id) + "/files" + q))
        return [t.FileEntry.from_dict(f) for f in (body or {}).get("files") or []]

    def _op_close_session(self, session_id: str) -> Op[t.SessionInfo]:
        return t.SessionInfo.from_dict((yield from self._call(self._req("DELETE", "/v1/sessions/" + quote(session_id)))))

    # -- misc ------------------------------------------------------------------

    def _op_languages(self) -> Op[list[t.Language]]:
        body = yield from self._call(self._req("GET", "/v1/languages"))
        return [t.Language.from_dict(x) for x in body or []]

    def _op_webhook_secret(self) -> Op[str]:
        body = yield from self._call(self._req("GET", "/v1/webhook-secret"))
        return str(body["secret"])

    def _redirect(self, req: Request, resp: Response) -> Request | None:
        """The request that follows a redirect answer, or None. The key
        goes only to the API's own origin (a presigned S3 URL needs none
        and refuses one)."""
        loc = resp.headers.get("location")
        if not req.follow_redirects or resp.status not in (301, 302, 303, 307, 308) or not loc:
            return None
        target = urllib.parse.urljoin(f"{self._scheme}://{self._host}:{self._port}{req.path}", loc)
        headers = {k: v for k, v in req.headers.items() if k.lower() != "authorization"}
        if self._same_origin(target):
            headers = dict(req.headers)
        return Request("GET", target, None, headers, req.timeout, False)

    def _same_origin(self, url: str) -> bool:
        p = urllib.parse.urlsplit(url)
        return (p.scheme, p.hostname, p.port or (443 if p.scheme == "https" else 80)) == (self._scheme, self._host, self._port)

    def _target(self, path: str) -> tuple[str, str, int, str]:
        """scheme, host, port and path of a request's path (or absolute URL)."""
        if path.startswith(("http://", "https://")):
            p = urllib.parse.urlsplit(path)
            return p.scheme, p.hostname or "", p.port or (443 if p.scheme == "https" else 80), \
                (p.path or "/") + ("?" + p.query if p.query else "")
        return self._scheme, self._host, self._port, path


def output_collector() -> tuple[bytearray, bytearray, Callable[[t.Event], t.Result | None]]:
    """Buffers for a job's live output and a function to feed events to;
    it returns the Result at the end."""
    out, err = bytearray(), bytearray()

    def feed(ev: t.Event) -> t.Result | None:
        if isinstance(ev, t.OutputEvent) and ev.step == "run":
            (out if ev.stream == "stdout" else err).extend(ev.data_bytes)
        elif isinstance(ev, t.ResultEvent):
            return ev.result
        return None
    return out, err, feed


__all__ = ["ApiError", "Base", "Op", "Request", "Response", "Retry", "SSEParser", "Sleep", "check", "event", "quote"]
