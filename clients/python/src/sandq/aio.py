"""The asyncio client: HTTP/1.1 over asyncio streams, one connection per
request, the same operations as the sync client (package _core)."""

from __future__ import annotations

import asyncio
import json
import ssl
from types import TracebackType
from typing import Any, AsyncIterator, Iterable, Mapping, Sequence, TypeVar

from . import _types as t
from ._core import Base, JobLike, Op, Request, Response, Retry, Sleep, SSEParser, check, event, output_collector
from ._errors import ApiError
from .evals import EvalReport

__all__ = ["AsyncClient", "AsyncSession"]

R = TypeVar("R")

_MAX_HEADER = 64 << 10


class ProtocolError(OSError):
    """The server's answer is not HTTP/1.1 as this client reads it."""


class _Conn:
    """One HTTP/1.1 exchange on an asyncio stream: the answer's status and
    headers, then its body (Content-Length, chunked, or to the end)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.status = 0
        self.headers: dict[str, str] = {}
        self._left: int | None = None  # bytes of the body (or of the current chunk) not yet read
        self._chunked = False
        self._done = False

    async def start(self, method: str, host: str, port: int, default_port: int, path: str, headers: Mapping[str, str],
                    body: bytes | None) -> None:
        h = dict(headers)
        h["Host"] = host if port == default_port else f"{host}:{port}"
        h["Connection"] = "close"
        if body is not None or method in ("POST", "PUT", "PATCH"):
            h["Content-Length"] = str(len(body or b""))
        head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
        self.writer.write(head.encode("latin-1") + (body or b""))
        await self.writer.drain()
        while True:
            line = await self.reader.readuntil(b"\n")
            parts = line.decode("latin-1").split(" ", 2)
            if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
                raise ProtocolError(f"sandq: not an HTTP answer: {line[:100]!r}")
            self.status = int(parts[1])
            self.headers = {}
            size = 0
            while True:
                line = await self.reader.readuntil(b"\n")
                size += len(line)
                if size > _MAX_HEADER:
                    raise ProtocolError("sandq: the answer's header is too large")
                if line in (b"\r\n", b"\n"):
                    break
                k, _, v = line.decode("latin-1").partition(":")
                self.headers[k.strip().lower()] = v.strip()
            if self.status >= 200 or self.status == 101:
                break  # 1xx: another header follows
        self._chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
        if method == "HEAD" or self.status in (204, 304):
            self._done = True
        elif not self._chunked and "content-length" in self.headers:
            self._left = int(self.headers["content-length"])
            self._done = self._left == 0

    async def read_some(self) -> bytes:
        """The next piece of the body; b"" at its end."""
        if self._done:
            return b""
        if self._chunked:
            if not self._left:
                size_line = await self.reader.readuntil(b"\n")
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while (await self.reader.readuntil(b"\n")) not in (b"\r\n", b"\n"):
                        pass  # trailers
                    self._done = True
                    return b""
                self._left = size
            data = await self.reader.read(min(self._left, 1 << 16))
            if not data:
                raise ProtocolError("sandq: the answer ended inside a chunk")
            self._left -= len(data)
            if self._left == 0:
                await self.reader.readuntil(b"\n")  # the chunk's CRLF
            return data
        if self._left is not None:
            data = await self.reader.read(min(self._left, 1 << 16))
            if not data:
                raise ProtocolError("sandq: the answer ended early")
            self._left -= len(data)
            self._done = self._left == 0
            return data
        data = await self.reader.read(1 << 16)
        self._done = not data
        return data

    async def read_all(self) -> bytes:
        out = bytearray()
        while True:
            b = await self.read_some()
            if not b:
                return bytes(out)
            out += b

    async def lines(self) -> AsyncIterator[str]:
        buf = b""
        while True:
            b = await self.read_some()
            if not b:
                if buf:
                    yield buf.decode("utf-8").rstrip("\r")
                return
            buf += b
            while True:
                i = buf.find(b"\n")
                if i < 0:
                    break
                line, buf = buf[:i], buf[i + 1:]
                yield line.decode("utf-8").rstrip("\r")

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (OSError, ssl.SSLError):
            pass


class AsyncClient(Base):
    """The asyncio sandq client: the methods of Client, as coroutines and
    async iterators. url and api_key default to $SANDQ_API_URL and
    $SANDQ_API_KEY. Safe to share between tasks."""

    def __init__(self, url: str | None = None, api_key: str | None = None, *, timeout: float = 90.0,
                 retry: Retry | None = None, ssl_context: ssl.SSLContext | None = None) -> None:
        super().__init__(url, api_key, timeout=timeout, retry=retry)
        self._ssl = ssl_context

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        return None

    # -- transport -------------------------------------------------------------

    async def _connect(self, req: Request) -> _Conn:
        scheme, host, port, path = self._target(req.path)
        timeout = req.timeout if req.timeout is not None else self.timeout
        ctx = (self._ssl or ssl.create_default_context()) if scheme == "https" else None
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, ssl=ctx, server_hostname=host if ctx else None, limit=_MAX_HEADER), self.timeout)
        conn = _Conn(reader, writer)
        try:
            await asyncio.wait_for(conn.start(req.method, host, port, 443 if scheme == "https" else 80, path, req.headers, req.body),
                                   timeout)
        except BaseException:
            await conn.close()
            raise
        return conn

    async def _send_once(self, req: Request) -> Response:
        for _ in range(5):
            timeout = req.timeout if req.timeout is not None else self.timeout
            conn = await self._connect(req)
            try:
                out = Response(conn.status, conn.headers, await asyncio.wait_for(conn.read_all(), timeout))
            finally:
                await conn.close()
            nxt = self._redirect(req, out)
            if nxt is None:
                return out
            req = nxt
        raise ApiError(310, {"detail": "too many redirects"})

    async def _send(self, req: Request) -> Response:
        attempt = 0
        while True:
            resp = await self._send_once(req)
            try:
                return check(resp)
            except ApiError as e:
                attempt += 1
                d = self.retry.delay(attempt, e)
                if d is None:
                    return resp
                await asyncio.sleep(d)

    async def _open(self, req: Request) -> _Conn:
        attempt = 0
        while True:
            conn = await self._connect(req)
            if conn.status < 400:
                return conn
            try:
                check(Response(conn.status, conn.headers, await conn.read_all()))
            except ApiError as e:
                attempt += 1
                d = self.retry.delay(attempt, e)
                if d is None:
                    raise
                await asyncio.sleep(d)
            finally:
                await conn.close()

    async def _drive(self, op: Op[R]) -> R:
        try:
            step = next(op)
            while True:
                if isinstance(step, Sleep):
                    await asyncio.sleep(step.seconds)
                    step = op.send(None)
                else:
                    step = op.send(await self._send(step))
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]

    # -- jobs ------------------------------------------------------------------

    async def submit(self, job: JobLike, wait: float | None = None) -> t.Result:
        """See Client.submit."""
        return await self._drive(self._op_submit(job, wait))

    async def get(self, job_id: str, wait: float | None = None) -> t.Result:
        return await self._drive(self._op_get(job_id, wait))

    async def wait(self, job_id: str, timeout: float | None = None, poll: float = 55.0) -> t.Result:
        return await self._drive(self._op_wait(job_id, timeout, poll))

    async def run(self, job: JobLike, timeout: float | None = None) -> t.Result:
        return await self._drive(self._op_run(job, timeout))

    async def judge(self, lang: str, code: str, tests: Iterable[t.TestCase | Mapping[str, Any]], *, compare: str | None = None,
                    checker: t.Checker | Mapping[str, str] | None = None, stop_on_first_failure: bool | None = None,
                    limits: t.Limits | Mapping[str, Any] | None = None, timeout: float | None = None,
                    **fields: Any) -> t.Result:
        """See Client.judge."""
        body = self._judged(lang, code, tests, compare, checker, stop_on_first_failure, limits, fields)
        return await self.run(body, timeout=timeout)

    async def cancel(self, job_id: str) -> t.Result:
        return await self._drive(self._op_cancel(job_id))

    async def events(self, job_id: str, last_event_id: str | None = None) -> AsyncIterator[t.Event]:
        """See Client.events. Closing the iterator (or cancelling the task)
        closes the connection."""
        last = last_event_id
        while True:
            conn = await self._open(self._events_req(job_id, last))
            parser = SSEParser()
            try:
                async for line in conn.lines():
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
            except (OSError, asyncio.IncompleteReadError, ValueError):
                pass  # dropped: resume after the last output
            finally:
                await conn.close()
            await asyncio.sleep(0.2)

    async def stream(self, job: JobLike) -> AsyncIterator[t.Event]:
        """Submit a job with live output and follow it."""
        d = dict(job.to_dict() if isinstance(job, t.Job) else job, stream=True)
        r = await self.submit(d)
        async for ev in self.events(r.id):
            yield ev

    async def output(self, job_id: str) -> tuple[bytes, bytes, t.Result]:
        out, err, feed = output_collector()
        async for ev in self.events(job_id):
            r = feed(ev)
            if r is not None:
                return bytes(out), bytes(err), r
        raise ApiError(0, {"detail": "the event stream ended without a result"})

    # -- artifacts -------------------------------------------------------------

    async def artifacts(self, job_id: str) -> list[t.Artifact]:
        return await self._drive(self._op_artifacts(job_id))

    async def download(self, job_id: str, name: str) -> bytes:
        return await self._drive(self._op_download(job_id, name))

    # -- batches ---------------------------------------------------------------

    async def batch(self, jobs: Iterable[JobLike], batch_id: str | None = None) -> t.Batch:
        return await self._drive(self._op_batch(jobs, batch_id))

    async def batch_progress(self, batch_id: str) -> t.BatchProgress:
        return await self._drive(self._op_batch_progress(batch_id))

    async def batch_results(self, batch_id: str) -> AsyncIterator[t.Result]:
        conn = await self._open(self._batch_results_req(batch_id))
        try:
            async for line in conn.lines():
                if line.strip():
                    yield t.Result.from_dict(json.loads(line))
        finally:
            await conn.close()

    async def evaluate(self, samples: Mapping[str, Sequence[JobLike]], ks: Sequence[int] = (1,), *,
                       batch_id: str | None = None, tag: str = "task") -> EvalReport:
        """See Client.evaluate."""
        b = await self.batch(self._eval_jobs(samples, tag), batch_id)
        results = [r async for r in self.batch_results(b.id)] if b.enqueued else []
        return self._eval_report(b, results, ks, tag)

    # -- sessions --------------------------------------------------------------

    async def open_session(self, lang: str, *, id: str | None = None, limits: t.Limits | Mapping[str, Any] | None = None,
                           libraries: Sequence[str] | None = None, files: Sequence[t.File | Mapping[str, Any]] | None = None,
                           env: Mapping[str, str] | None = None, environment: str | None = None,
                           network: Mapping[str, Any] | None = None, idle_ttl_seconds: int | None = None,
                           lifetime_seconds: int | None = None, timeout: float | None = None) -> AsyncSession:
        """See Client.open_session; use it with async with."""
        spec = self._session_spec(lang, limits, files, dict(
            id=id, libraries=list(libraries) if libraries else None, env=dict(env) if env else None,
            environment=environment, network=network, idle_ttl_seconds=idle_ttl_seconds, lifetime_seconds=lifetime_seconds))
        return AsyncSession(self, await self._drive(self._op_open_session(spec, timeout)))

    async def session(self, session_id: str) -> AsyncSession:
        return AsyncSession(self, await self._drive(self._op_session_info(session_id)))

    async def sessions(self) -> list[t.SessionInfo]:
        return await self._drive(self._op_sessions())

    # -- misc ------------------------------------------------------------------

    async def languages(self) -> list[t.Language]:
        return await self._drive(self._op_languages())

    async def webhook_secret(self) -> str:
        return await self._drive(self._op_webhook_secret())


class AsyncSession:
    """A session of an AsyncClient: Session's methods as coroutines."""

    def __init__(self, client: AsyncClient, info: t.SessionInfo) -> None:
        self.client = client
        self.id = info.id
        self.info = info

    def __repr__(self) -> str:
        return f"AsyncSession({self.id!r})"

    async def __aenter__(self) -> AsyncSession:
        return self

    async def __aexit__(self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            await self.close()
        except ApiError:
            pass

    async def exec(self, code: str, timeout_ms: int | None = None) -> t.CellResult:
        default = self.info.limits.timeout_ms if self.info.limits else None
        return await self.client._drive(self.client._op_exec(self.id, code, timeout_ms, default))

    async def interrupt(self) -> t.SessionInfo:
        self.info = await self.client._drive(self.client._op_interrupt(self.id))
        return self.info

    async def upload(self, path: str, data: bytes) -> None:
        await self.client._drive(self.client._op_upload(self.id, path, data))

    async def download(self, path: str) -> bytes:
        return await self.client._drive(self.client._op_session_download(self.id, path))

    async def files(self, directory: str = "") -> list[t.FileEntry]:
        return await self.client._drive(self.client._op_files(self.id, directory))

    async def refresh(self) -> t.SessionInfo:
        self.info = await self.client._drive(self.client._op_session_info(self.id))
        return self.info

    async def close(self) -> t.SessionInfo:
        self.info = await self.client._drive(self.client._op_close_session(self.id))
        return self.info
