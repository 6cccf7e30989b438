"""Errors: the API's RFC 9457 problems as exceptions, one class per status."""

from __future__ import annotations

from typing import Any, Mapping

__all__ = ["ApiError", "BadRequest", "Unauthorized", "Forbidden", "NotFound", "Conflict", "SessionEnded",
           "PayloadTooLarge", "Invalid", "RateLimited", "Unavailable", "error_for"]


class ApiError(Exception):
    """An error answer of the API, with its problem details: status,
    title, detail, and errors (dicts with location, message, value; a
    location names the field, such as "body.limits.memory_mb", or
    "quota" for a 429). retry_after is the Retry-After header in seconds,
    when the API sent one."""

    def __init__(self, status: int, problem: Mapping[str, Any] | None = None, retry_after: float | None = None):
        self.status = status
        self.problem: dict[str, Any] = dict(problem or {})
        self.title: str = str(self.problem.get("title") or "")
        self.detail: str = str(self.problem.get("detail") or self.title)
        errors = self.problem.get("errors")
        self.errors: list[dict[str, Any]] = [e for e in errors if isinstance(e, dict)] if isinstance(errors, list) else []
        self.retry_after = retry_after
        where = "; ".join(f"{e.get('location')}: {e.get('message')}" for e in self.errors)
        super().__init__(f"{status}: {self.detail}" + (f" ({where})" if where else ""))


class BadRequest(ApiError):
    """400: the body could not be read (a batch that is not JSON or NDJSON)."""


class Unauthorized(ApiError):
    """401: no key, or an unknown or revoked key."""


class Forbidden(ApiError):
    """403: the key lacks the scope."""


class NotFound(ApiError):
    """404: no such job, batch or session (or another tenant's)."""


class Conflict(ApiError):
    """409: the ID exists; cancel of a job that has ended; a session
    that is running another cell."""


class SessionEnded(ApiError):
    """410: the session has ended. state is closed, expired, lost or oom;
    reason says why."""

    def __init__(self, status: int, problem: Mapping[str, Any] | None = None, retry_after: float | None = None):
        super().__init__(status, problem, retry_after)
        first = self.errors[0] if self.errors else {}
        self.state: str = str(first.get("value") or "")
        self.reason: str = str(first.get("message") or "")


class PayloadTooLarge(ApiError):
    """413: a body past the API's cap."""


class Invalid(ApiError):
    """422: an invalid job or request; errors name the fields."""


class RateLimited(ApiError):
    """429: a quota reached (the key's rate, the tenant's jobs, sessions,
    streams, ...), named in errors ({"location": "quota", "value": ...})."""

    @property
    def quota(self) -> str:
        for e in self.errors:
            if e.get("location") == "quota":
                return str(e.get("value") or "")
        return ""


class Unavailable(ApiError):
    """503: Redis did not answer; for a session, no worker has a free slot."""


_BY_STATUS: dict[int, type[ApiError]] = {400: BadRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound,
                                         409: Conflict, 410: SessionEnded, 413: PayloadTooLarge, 422: Invalid,
                                         429: RateLimited, 503: Unavailable}


def error_for(status: int, problem: Mapping[str, Any] | None, retry_after: float | None = None) -> ApiError:
    """The exception for an error answer."""
    return _BY_STATUS.get(status, ApiError)(status, problem, retry_after)
