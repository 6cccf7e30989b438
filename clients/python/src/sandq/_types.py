"""Typed results: dataclasses for what the API sends and takes.

Every result class is built with ``from_dict`` from the API's JSON; fields
the API adds later are kept in ``raw`` (the whole JSON object), so nothing
is lost. Request classes (Job, Limits, TestCase, ...) have ``to_dict``,
which leaves out fields that are None.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as _dt
import types
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Mapping, TypeVar, Union

__all__ = [
    "Artifact", "Batch", "BatchItem", "BatchProgress", "CaseResult", "CellError", "CellResult",
    "Checker", "Event", "File", "FileEntry", "InstallResult", "ItemError", "Job", "JudgeSpec",
    "Language", "Limits", "NetworkPolicy", "NetworkUse", "OutputEvent", "Provenance", "Result",
    "ResultEvent", "SessionInfo", "StatusEvent", "StepResult", "TestCase", "Usage", "WebhookStatus",
    "FINAL_STATUSES", "decode_output",
]

T = TypeVar("T")

#: The statuses a job ends with; "queued" and "running" are the others.
FINAL_STATUSES = frozenset({"succeeded", "failed", "compile_error", "timeout", "oom", "output_limit",
                            "canceled", "rejected", "internal_error"})


def decode_output(data: str, encoding: str | None) -> bytes:
    """The exact bytes of an output field: UTF-8 text, or base64 when
    encoding says so."""
    if encoding == "base64":
        return base64.b64decode(data)
    return data.encode("utf-8")


def _parse_time(v: Any) -> _dt.datetime | None:
    if not isinstance(v, str) or not v:
        return None
    try:
        t = _dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        return None
    # Go's zero time means "not set".
    return None if t.year <= 1 else t


_hints: dict[type, dict[str, Any]] = {}


def _convert(tp: Any, v: Any) -> Any:
    if v is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _convert(args[0], v) if len(args) == 1 else v
    if origin is list:
        (item,) = typing.get_args(tp)
        return [_convert(item, x) for x in v] if isinstance(v, list) else []
    if origin is dict:
        _, item = typing.get_args(tp)
        return {k: _convert(item, x) for k, x in v.items()} if isinstance(v, dict) else {}
    if tp is _dt.datetime:
        return _parse_time(v)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _from_dict(tp, v) if isinstance(v, dict) else None
    if tp is float and isinstance(v, int):
        return float(v)
    return v


def _from_dict(cls: type[T], data: Mapping[str, Any]) -> T:
    hints = _hints.get(cls)
    if hints is None:
        hints = _hints[cls] = typing.get_type_hints(cls)
    kw: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name == "raw":
            kw["raw"] = dict(data)
            continue
        key = f.metadata.get("json", f.name)
        if key in data and data[key] is not None:
            kw[f.name] = _convert(hints[f.name], data[key])
    return cls(**kw)


def _to_dict(obj: Any) -> Any:
    if isinstance(obj, _Request) and type(obj).to_dict is not _Request.to_dict:
        return obj.to_dict()  # its own form (File: data as base64)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(obj):
            if f.name == "raw":
                continue
            v = getattr(obj, f.name)
            if v is None:
                continue
            out[f.metadata.get("json", f.name)] = _to_dict(v)
        return out
    if isinstance(obj, (list, tuple)):
        return [_to_dict(x) for x in obj]
    if isinstance(obj, dict):
        return {k: _to_dict(x) for k, x in obj.items()}
    return obj


class _Model:
    """from_dict for result classes."""

    @classmethod
    def from_dict(cls: type[T], data: Mapping[str, Any]) -> T:
        return _from_dict(cls, data)


class _Request:
    """to_dict for request classes."""

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = _to_dict(self)
        return d


# -- requests ---------------------------------------------------------------


@dataclass
class Limits(_Model, _Request):
    """A job's or session's limits (docs/jobs.md); None: the default."""
    timeout_ms: int | None = None
    cpu_ms: int | None = None
    memory_mb: int | None = None
    cpus: float | None = None
    pids: int | None = None
    output_bytes: int | None = None
    disk_mb: int | None = None
    tmp_mb: int | None = None
    nofile: int | None = None
    file_size_mb: int | None = None


@dataclass
class File(_Request):
    """An input file: its bytes (data) or their base64 (content_b64)."""
    path: str
    data: bytes | None = None
    content_b64: str | None = None
    mode: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"path": self.path}
        if self.data is not None:
            d["content_b64"] = base64.b64encode(self.data).decode("ascii")
        elif self.content_b64 is not None:
            d["content_b64"] = self.content_b64
        if self.mode is not None:
            d["mode"] = self.mode
        return d


@dataclass
class TestCase(_Request):
    """One case of a judged job: the program's stdin and the expected stdout."""
    __test__: ClassVar[bool] = False  # not a unittest/pytest class
    stdin: str | None = None
    expected_stdout: str | None = None
    name: str | None = None


@dataclass
class Checker(_Request):
    """A program that judges an answer: run with the files input, output
    and answer; exit 0 accepts."""
    lang: str
    code: str


@dataclass
class JudgeSpec(_Request):
    """How a judged job's output is compared: compare is "lines" (the
    default), "exact", "tokens" or "float"; or a checker program."""
    compare: str | None = None
    checker: Checker | None = None
    abs_tol: float | None = None
    rel_tol: float | None = None
    stop_on_first_failure: bool | None = None


@dataclass
class NetworkPolicy(_Model, _Request):
    """Hosts a job may reach (needs the key's network:egress scope)."""
    allow: list[str] = field(default_factory=list)


@dataclass
class Job(_Request):
    """A job to submit (docs/jobs.md). With tests, it is judged: compiled
    once, run per case, and its Result has verdict, cases and score."""
    lang: str
    code: str
    id: str | None = None
    stdin: str | None = None
    args: list[str] | None = None
    env: dict[str, str] | None = None
    files: list[File] | None = None
    libraries: list[str] | None = None
    limits: Limits | None = None
    output_files: list[str] | None = None
    plot_formats: list[str] | None = None
    tags: dict[str, str] | None = None
    queue: str | None = None
    isolation: str | None = None
    environment: str | None = None
    max_retry: int | None = None
    stream: bool | None = None
    network: NetworkPolicy | None = None
    tests: list[TestCase] | None = None
    judge: JudgeSpec | None = None
    callback_url: str | None = None


# -- results ----------------------------------------------------------------


@dataclass
class Usage(_Model):
    wall_ms: int = 0
    cpu_ms: int = 0
    max_rss_kb: int = 0
    prestarted: bool = False


@dataclass
class StepResult(_Model):
    """A compile or install step's outcome and output."""
    stdout: str = ""
    stderr: str = ""
    stdout_encoding: str | None = None
    stderr_encoding: str | None = None
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    exit_code: int | None = None
    signal: str | None = None
    usage: Usage = field(default_factory=Usage)
    cached: bool = False
    """A judged job's compile reused from the worker's compile cache."""


@dataclass
class InstallResult(_Model):
    cached: bool = False
    took_ms: int = 0
    volume: str | None = None
    step: StepResult | None = None


@dataclass
class Artifact(_Model):
    """A plot or output file of a job: download it with Client.download."""
    name: str = ""
    kind: str = ""  # plot, file or output
    size: int = 0
    url: str = ""
    content_type: str | None = None


@dataclass
class NetworkUse(_Model):
    """What a job with a network policy did with one host."""
    host: str = ""
    port: int = 0
    connections: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    failed: int = 0
    refused: bool = False
    reason: str | None = None


@dataclass
class CaseResult(_Model):
    """One test case of a judged job: its verdict (accepted,
    wrong_answer, runtime_error, time_limit, memory_limit,
    output_limit, skipped, ...), output and usage."""
    verdict: str = ""
    name: str | None = None
    stdout: str | None = None
    stderr: str | None = None
    expected: str | None = None
    detail: str | None = None
    checker: str | None = None
    exit_code: int | None = None
    signal: str | None = None
    cpu_ms: int = 0
    wall_ms: int = 0
    max_rss_kb: int = 0
    rerun: bool = False


@dataclass
class Provenance(_Model):
    """Where and how a job ran."""
    worker: str | None = None
    image: str | None = None
    toolchain: str | None = None
    environment: str | None = None  # as the job named it
    recipe: str | None = None  # the hash of the recipe its image was built from
    cpu_model: str | None = None
    cpus: int = 0
    cpu_shared: bool = False
    load1: float = 0.0
    limits: Limits = field(default_factory=Limits)


@dataclass
class WebhookStatus(_Model):
    url: str = ""
    state: str = ""  # pending, delivered or failed
    attempts: int = 0
    last_status_code: int | None = None
    last_error: str | None = None
    delivered_at: _dt.datetime | None = None


@dataclass
class Result(_Model):
    """A job as the API shows it: queued, running, or final with its
    outcome. Judged jobs have verdict, score and cases."""
    id: str = ""
    status: str = ""
    stdout: str = ""
    stderr: str = ""
    stdout_encoding: str | None = None
    stderr_encoding: str | None = None
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    stdout_total_bytes: int = 0
    stderr_total_bytes: int = 0
    stdout_artifact: str | None = None
    stderr_artifact: str | None = None
    exit_code: int | None = None
    signal: str | None = None
    reason: str | None = None
    install: InstallResult | None = None
    compile: StepResult | None = None
    usage: Usage = field(default_factory=Usage)
    network: list[NetworkUse] = field(default_factory=list)
    attempts: int = 0
    worker: str | None = None
    tenant: str | None = None
    lang: str | None = None
    queue: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    enqueued_at: _dt.datetime | None = None
    started_at: _dt.datetime | None = None
    finished_at: _dt.datetime | None = None
    artifacts: list[Artifact] = field(default_factory=list)
    artifact_errors: list[str] = field(default_factory=list)
    dropped_artifacts: list[str] = field(default_factory=list)
    verdict: str | None = None
    score: float | None = None
    cases: list[CaseResult] = field(default_factory=list)
    provenance: Provenance | None = None
    webhook: WebhookStatus | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def final(self) -> bool:
        """Whether the job has ended."""
        return self.status in FINAL_STATUSES

    @property
    def ok(self) -> bool:
        """Whether the job succeeded (for a judged job: every case accepted)."""
        return self.status == "succeeded"

    @property
    def stdout_bytes(self) -> bytes:
        return decode_output(self.stdout, self.stdout_encoding)

    @property
    def stderr_bytes(self) -> bytes:
        return decode_output(self.stderr, self.stderr_encoding)


@dataclass
class ItemError(_Model):
    status: int = 0
    detail: str = ""
    errors: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class BatchItem(_Model):
    """One job of a submitted batch: its ID and status, or its error."""
    index: int = 0
    id: str | None = None
    status: str | None = None
    error: ItemError | None = None


@dataclass
class Batch(_Model):
    """A submitted batch: every item's ID and status, or its error."""
    id: str = ""
    total: int = 0
    enqueued: int = 0
    items: list[BatchItem] = field(default_factory=list)


@dataclass
class BatchProgress(_Model):
    id: str = ""
    total: int = 0
    done: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    created: _dt.datetime | None = None


@dataclass
class SessionInfo(_Model):
    """A session's record: state is starting, ready, busy, closed,
    expired, lost or oom; reason says why it ended."""
    id: str = ""
    lang: str = ""
    state: str = ""
    reason: str | None = None
    tenant: str | None = None
    worker: str | None = None
    execution_count: int = 0
    idle_ttl_seconds: int = 0
    limits: Limits | None = None
    created_at: _dt.datetime | None = None
    last_used_at: _dt.datetime | None = None
    expires_at: _dt.datetime | None = None
    ended_at: _dt.datetime | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass
class CellError(_Model):
    """The exception a cell raised."""
    name: str = ""
    value: str = ""
    traceback: list[str] = field(default_factory=list)


@dataclass
class CellResult(_Model):
    """A cell's outcome: status ok, error, timeout, or session_ended when
    the interpreter died during it; results are displayed values as MIME
    bundles (type to content, binary types in base64)."""
    id: str = ""
    status: str = ""
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    execution_count: int = 0
    results: list[dict[str, str]] = field(default_factory=list)
    error: CellError | None = None
    session: str = ""
    reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    artifacts: list[Artifact] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass
class FileEntry(_Model):
    """A file or directory of a session's work dir."""
    path: str = ""
    size: int = 0
    dir: bool = False
    mode: int = 0
    mod_time: _dt.datetime | None = None


@dataclass
class Language(_Model):
    name: str = ""
    aliases: list[str] = field(default_factory=list)
    version: str | None = None
    image: str | None = None
    libraries: str | None = None


# -- events -----------------------------------------------------------------


@dataclass
class StatusEvent(_Model):
    """The job's status changed."""
    status: str = ""
    kind: ClassVar[Literal["status"]] = "status"


@dataclass
class OutputEvent(_Model):
    """A chunk of live output: step (compile or run), stream (stdout or
    stderr), where it starts in the stream (offset), and the data."""
    step: str = ""
    stream: str = ""
    offset: int = 0
    data: str = ""
    encoding: str | None = None
    dropped: int = 0
    limit: bool = False
    attempt: int = 0
    from_result: bool = False
    id: str | None = None  # the SSE id (resume point); None for output made from the Result
    kind: ClassVar[Literal["output"]] = "output"

    @property
    def data_bytes(self) -> bytes:
        """The chunk's exact bytes."""
        return decode_output(self.data, self.encoding)


@dataclass
class ResultEvent:
    """The job ended: its final Result, always the last event."""
    result: Result
    kind: ClassVar[Literal["result"]] = "result"


Event = Union[StatusEvent, OutputEvent, ResultEvent]
