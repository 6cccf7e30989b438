"""sandq: a client for sandq's HTTP API, on Python's standard library alone.

    from sandq import Client, Job

    c = Client("http://127.0.0.1:8080", api_key="sqk_...")
    r = c.run(Job(lang="python", code="print(6 * 7)"))    # waits; a Result
    print(r.status, r.stdout)

AsyncClient (sandq.aio) has the same methods as coroutines. Errors are
ApiError subclasses carrying the API's RFC 9457 problem; 429 and 503
answers are retried, honoring Retry-After (see Retry). Webhook
signatures: sandq.webhooks.verify. pass@k: sandq.evals.
"""

from ._core import Retry, __version__
from ._errors import (ApiError, BadRequest, Conflict, Forbidden, Invalid, NotFound, PayloadTooLarge, RateLimited,
                      SessionEnded, Unauthorized, Unavailable)
from ._types import (FINAL_STATUSES, Artifact, Batch, BatchItem, BatchProgress, CaseResult, CellError, CellResult, Checker,
                     Event, File, FileEntry, InstallResult, ItemError, Job, JudgeSpec, Language, Limits, NetworkPolicy,
                     NetworkUse, OutputEvent, Provenance, Result, ResultEvent, SessionInfo, StatusEvent, StepResult,
                     TestCase, Usage, WebhookStatus, decode_output)
from .aio import AsyncClient, AsyncSession
from .client import Client, Session
from .evals import EvalReport, TaskCount, pass_at_k
from .webhooks import InvalidSignature, parse_webhook, verify_webhook

__all__ = [
    "ApiError", "Artifact", "AsyncClient", "AsyncSession", "BadRequest", "Batch", "BatchItem", "BatchProgress",
    "CaseResult", "CellError", "CellResult", "Checker", "Client", "Conflict", "EvalReport", "Event", "FINAL_STATUSES",
    "File", "FileEntry", "Forbidden", "InstallResult", "Invalid", "InvalidSignature", "ItemError", "Job", "JudgeSpec",
    "Language", "Limits", "NetworkPolicy", "NetworkUse", "NotFound", "OutputEvent", "PayloadTooLarge", "Provenance",
    "RateLimited", "Result", "ResultEvent", "Retry", "Session", "SessionEnded", "SessionInfo", "StatusEvent",
    "StepResult", "TaskCount", "TestCase", "Unauthorized", "Unavailable", "Usage", "WebhookStatus", "__version__",
    "decode_output", "parse_webhook", "pass_at_k", "verify_webhook",
]
