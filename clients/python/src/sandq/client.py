"""The synchronous client, on http.client."""

from __future__ import annotations

import http.client
import json
import os
import socket
import ssl
import time
from types import TracebackType
from typing import Any, Iterable, Iterator, Mapping, Sequence, TypeVar

from . import _types as t
from ._core import Base, JobLike, Op, Request, Response, Retry, Sleep, SSEParser, check, event, output_collector
from ._errors import ApiError
from .evals import EvalReport

__all__ = ["Client", "Session"]

R = TypeVar("R")


class _Stream:
    """An open streaming answer: its body line by line."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse) -> None:
        self.conn, self.resp = conn, resp

    def lines(self) -> Iterator[str]:
        while True:
            raw = self.resp.readline()
            if not raw:
                return
            yield raw.decode("utf-8").rstrip("\r\n")

    def close(self) -> None:
        try:
            if self.conn.sock is not None:
                self.conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.conn.close()


class Client(Base):
    """A sandq API client. url and api_key default to $SANDQ_API_URL and
    $SANDQ_API_KEY. timeout bounds each request (long-polls and cells get
    their wait on top). Requests answered 429 or 503 are retried as
    retry says (Retry()'s defaults: 5 retries, honoring Retry-After).
    Thread-safe: it keeps no per-request state."""

    def __init__(self, url: str | None = None, api_key: str | None = None, *, timeout: float = 90.0,
                 retry: Retry | None = None, ssl_context: ssl.SSLContext | None = None) -> None:
        super().__init__(url, api_key, timeout=timeout, retry=retry)
        self._ssl = ssl_context

    # -- transport -------------------------------------------------------------

    def _connect(self, req: Request) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        scheme, host, port, path = self._target(req.path)
        timeout = req.timeout if req.timeout is not None else self.timeout
        conn: http.client.HTTPConnection
        if scheme == "https":
            conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=self._ssl or ssl.create_default_context())
        else:
            conn = http.client.HTTPConnection(host, port, timeout=timeout)
        try:
            conn.request(req.method, path, body=req.body, headers=req.headers)
            return conn, conn.getresponse()
        except BaseException:
            conn.close()
            raise

    def _send_once(self, req: Request) -> Response:
        for _ in range(5):  # redirects
            conn, resp = self._connect(req)
            try:
                out = Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
            finally:
                conn.close()
            nxt = self._redirect(req, out)
            if nxt is None:
                return out
            req = nxt
        raise ApiError(310, {"detail": "too many redirects"})

    def _send(self, req: Request) -> Response:
        attempt = 0
        while True:
            resp = self._send_once(req)
            try:
                return check(resp)
            except ApiError as e:
                attempt += 1
                d = self.retry.delay(attempt, e)
                if d is None:
                    return resp  # the op raises it
                time.sleep(d)

    def _open(self, req: Request) -> _Stream:
        """Opens a streaming request, retried like any other."""
        attempt = 0
        while True:
            conn, resp = self._connect(req)
            if resp.status < 400:
                return _Stream(conn, resp)
            try:
                check(Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()))
            except ApiError as e:
                attempt += 1
                d = self.retry.delay(attempt, e)
                if d is None:
                    raise
                time.sleep(d)
            finally:
                conn.close()

    def _drive(self, op: Op[R]) -> R:
        try:
            step = next(op)
            while True:
                if isinstance(step, Sleep):
                    time.sleep(step.seconds)
                    step = op.send(None)
                else:
                    step = op.send(self._send(step))
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]

    # -- jobs ------------------------------------------------------------------

    def submit(self, job: JobLike, wait: float | None = None) -> t.Result:
        """Enqueue a job (a Job, or a dict in the job format). With wait
        (seconds, at most the server's --max-wait), the answer is the
        final Result if the job ended in time; else the job as it is."""
        return self._drive(self._op_submit(job, wait))

    def get(self, job_id: str, wait: float | None = None) -> t.Result:
        """The job; with wait (seconds), a long-poll for its end."""
        return self._drive(self._op_get(job_id, wait))

    def wait(self, job_id: str, timeout: float | None = None, poll: float = 55.0) -> t.Result:
        """Block until the job ends and return its final Result; raises
        TimeoutError after timeout seconds (the job goes on)."""
        return self._drive(self._op_wait(job_id, timeout, poll))

    def run(self, job: JobLike, timeout: float | None = None) -> t.Result:
        """Submit a job and wait for its final Result."""
        return self._drive(self._op_run(job, timeout))

    def judge(self, lang: str, code: str, tests: Iterable[t.TestCase | Mapping[str, Any]], *, compare: str | None = None,
              checker: t.Checker | Mapping[str, str] | None = None, stop_on_first_failure: bool | None = None,
              limits: t.Limits | Mapping[str, Any] | None = None, timeout: float | None = None, **fields: Any) -> t.Result:
        """Judge a program by its output: compiled once, run once per test
        case; the Result's verdict is "accepted" when every case is, cases
        has each case's verdict, score the share accepted. compare is
        "lines" (the default), "exact", "tokens" or "float"; checker a
        program run with the files input, output and answer. limits may
        set cpu_ms, each case's CPU time."""
        body = self._judged(lang, code, tests, compare, checker, stop_on_first_failure, limits, fields)
        return self.run(body, timeout=timeout)

    def cancel(self, job_id: str) -> t.Result:
        """Cancel a queued or running job; returns the job. Conflict (409)
        if it has ended already."""
        return self._drive(self._op_cancel(job_id))

    def events(self, job_id: str, last_event_id: str | None = None) -> Iterator[t.Event]:
        """Follow a job: StatusEvent on each change, OutputEvent for each
        chunk of live output (jobs submitted with stream=True; others get
        their output at the end), and last a ResultEvent. A dropped
        connection is resumed with Last-Event-ID: no output is repeated or
        lost."""
        last = last_event_id
        while True:
            stream = self._open(self._events_req(job_id, last))
            parser = SSEParser()
            try:
                for line in stream.lines():
                    msg = parser.line(line)
                    if msg is None:
                        continue
                    ev = event(*msg)
                    if ev is None:
                        continue
                    if isinstance(ev, t.OutputEvent) and ev.id:
                        last = ev.id
                    yield ev
                    if isinstance(ev, t.ResultEvent):
                        return
            except (OSError, http.client.HTTPException, ValueError):
                pass  # dropped: resume after the last output
            finally:
                stream.close()
            time.sleep(0.2)

    def stream(self, job: JobLike) -> Iterator[t.Event]:
        """Submit a job with live output and follow it (see events)."""
        d = dict(job.to_dict() if isinstance(job, t.Job) else job, stream=True)
        r = self.submit(d)
        return self.events(r.id)

    def output(self, job_id: str) -> tuple[bytes, bytes, t.Result]:
        """Follow a job's live output to its end: (stdout bytes, stderr
        bytes, final Result)."""
        out, err, feed = output_collector()
        for ev in self.events(job_id):
            r = feed(ev)
            if r is not None:
                return bytes(out), bytes(err), r
        raise ApiError(0, {"detail": "the event stream ended without a result"})

    # -- artifacts -------------------------------------------------------------

    def artifacts(self, job_id: str) -> list[t.Artifact]:
        """The job's plots and output files."""
        return self._drive(self._op_artifacts(job_id))

    def download(self, job_id: str, name: str) -> bytes:
        """An artifact's bytes (following the API's redirect to the store,
        without the key)."""
        return self._drive(self._op_download(job_id, name))

    def save_artifacts(self, job_id: str, directory: str) -> list[str]:
        """Download every artifact of the job under directory, keeping
        their names' folders; returns the paths written."""
        paths = []
        root = os.path.realpath(directory)
        for a in self.artifacts(job_id):
            path = os.path.realpath(os.path.join(root, a.name))
            if not path.startswith(root + os.sep):
                raise ValueError(f"sandq: artifact name {a.name!r} leaves {directory!r}")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(self.download(job_id, a.name))
            paths.append(path)
        return paths

    # -- batches ---------------------------------------------------------------

    def batch(self, jobs: Iterable[JobLike], batch_id: str | None = None) -> t.Batch:
        """Enqueue many jobs at once; every item's ID and status, or its
        error (an invalid job does not sink the others)."""
        return self._drive(self._op_batch(jobs, batch_id))

    def batch_progress(self, batch_id: str) -> t.BatchProgress:
        """The batch's jobs per status."""
        return self._drive(self._op_batch_progress(batch_id))

    def batch_results(self, batch_id: str) -> Iterator[t.Result]:
        """The batch's final Results, as its jobs finish."""
        req = self._batch_results_req(batch_id)
        req.timeout = max(self.timeout, 300.0)
        stream = self._open(req)
        try:
            for line in stream.lines():
                if line.strip():
                    yield t.Result.from_dict(json.loads(line))
        finally:
            stream.close()

    def evaluate(self, samples: Mapping[str, Sequence[JobLike]], ks: Sequence[int] = (1,), *,
                 batch_id: str | None = None, tag: str = "task") -> EvalReport:
        """An evaluation: every task's samples (jobs; judged jobs, with
        tests, pass on the verdict accepted, others on succeeded) run as
        one batch, tagged with their task; returns pass@k for each k in ks
        (those with enough samples per task), and the counts."""
        b = self.batch(self._eval_jobs(samples, tag), batch_id)
        results = list(self.batch_results(b.id)) if b.enqueued else []
        return self._eval_report(b, results, ks, tag)

    # -- sessions --------------------------------------------------------------

    def open_session(self, lang: str, *, id: str | None = None, limits: t.Limits | Mapping[str, Any] | None = None,
                     libraries: Sequence[str] | None = None, files: Sequence[t.File | Mapping[str, Any]] | None = None,
                     env: Mapping[str, str] | None = None, environment: str | None = None,
                     network: Mapping[str, Any] | None = None, idle_ttl_seconds: int | None = None,
                     lifetime_seconds: int | None = None, timeout: float | None = None) -> Session:
        """Open a session: a live interpreter in one container, run cell by
        cell, its state kept. Returns once the interpreter is ready
        (minutes with libraries). Unavailable (503) when no worker has a
        free slot (retried). Use it as a context manager to close it."""
        spec = self._session_spec(lang, limits, files, dict(
            id=id, libraries=list(libraries) if libraries else None, env=dict(env) if env else None,
            environment=environment, network=network, idle_ttl_seconds=idle_ttl_seconds, lifetime_seconds=lifetime_seconds))
        return Session(self, self._drive(self._op_open_session(spec, timeout)))

    def session(self, session_id: str) -> Session:
        """A Session for an existing session of this key's tenant."""
        return Session(self, self._drive(self._op_session_info(session_id)))

    def sessions(self) -> list[t.SessionInfo]:
        """The tenant's sessions, newest first."""
        return self._drive(self._op_sessions())

    # -- misc ------------------------------------------------------------------

    def languages(self) -> list[t.Language]:
        return self._drive(self._op_languages())

    def webhook_secret(self) -> str:
        """This key's webhook signing secret."""
        return self._drive(self._op_webhook_secret())


class Session:
    """A session of a Client (see Client.open_session). Its methods raise
    SessionEnded (410) once the session has ended, and Conflict (409)
    while another cell runs."""

    def __init__(self, client: Client, info: t.SessionInfo) -> None:
        self.client = client
        self.id = info.id
        self.info = info

    def __repr__(self) -> str:
        return f"Session({self.id!r})"

    def __enter__(self) -> Session:
        return self

    def __exit__(self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            self.close()
        except ApiError:
            pass  # gone already

    def exec(self, code: str, timeout_ms: int | None = None) -> t.CellResult:
        """Run code as a cell; timeout_ms bounds it (default: the session's)."""
        default = self.info.limits.timeout_ms if self.info.limits else None
        return self.client._drive(self.client._op_exec(self.id, code, timeout_ms, default))

    def interrupt(self) -> t.SessionInfo:
        """Interrupt the running cell, if any (KeyboardInterrupt in Python)."""
        self.info = self.client._drive(self.client._op_interrupt(self.id))
        return self.info

    def upload(self, path: str, data: bytes) -> None:
        """Write data (at most 16 MiB) to path in the work dir."""
        self.client._drive(self.client._op_upload(self.id, path, data))

    def download(self, path: str) -> bytes:
        """A file of the work dir."""
        return self.client._drive(self.client._op_session_download(self.id, path))

    def files(self, directory: str = "") -> list[t.FileEntry]:
        """The files and directories under directory (default: the work
        dir), recursively."""
        return self.client._drive(self.client._op_files(self.id, directory))

    def refresh(self) -> t.SessionInfo:
        """The session's record, read again."""
        self.info = self.client._drive(self.client._op_session_info(self.id))
        return self.info

    def close(self) -> t.SessionInfo:
        """Close the session (its container is removed); its final record.
        Closing an ended session is not an error."""
        self.info = self.client._drive(self.client._op_close_session(self.id))
        return self.info


