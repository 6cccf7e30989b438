"""Webhook signatures: a job's final view is POSTed to its callback_url
with the header

    Sandq-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>

where secret is the key's webhook secret (Client.webhook_secret()).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any

from ._types import Result

__all__ = ["SIGNATURE_HEADER", "InvalidSignature", "sign", "verify", "verify_webhook", "parse_webhook"]

SIGNATURE_HEADER = "Sandq-Signature"


class InvalidSignature(ValueError):
    """A webhook whose signature does not match, or is too old."""


def sign(secret: str, timestamp: int | str, body: bytes) -> str:
    """The v1 part of a Sandq-Signature: hex HMAC-SHA256 of "<t>.<body>"."""
    return hmac.new(secret.encode("utf-8"), str(timestamp).encode("ascii") + b"." + body, hashlib.sha256).hexdigest()


def verify(secret: str, header: str, body: bytes, tolerance: float = 300.0, now: float | None = None) -> bool:
    """Whether header (a Sandq-Signature value) signs the raw body with
    secret, made at most tolerance seconds from now. Constant time."""
    t, sigs = "", []
    for part in header.split(","):
        k, _, v = part.strip().partition("=")
        if k == "t":
            t = v
        elif k == "v1":
            sigs.append(v)
    if not t.isdigit() or not sigs:
        return False
    if abs((time.time() if now is None else now) - int(t)) > tolerance:
        return False
    want = sign(secret, t, body)
    return any(hmac.compare_digest(want, s) for s in sigs)


verify_webhook = verify


def parse_webhook(secret: str, header: str | None, body: bytes, tolerance: float = 300.0) -> Result:
    """The delivered job's Result, once its signature is verified; raises
    InvalidSignature if it does not verify."""
    if not header or not verify(secret, header, body, tolerance):
        raise InvalidSignature("sandq: the webhook's Sandq-Signature does not verify")
    data: Any = json.loads(body)
    return Result.from_dict(data)
