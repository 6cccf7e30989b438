"""Tests of the package without an API: webhook signatures, pass@k, the
SSE parser, typed results, and retries against a local HTTP server that
answers 429 and 503 (for both clients)."""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
import time
import unittest
from typing import Any

import sandq
from sandq import AsyncClient, Client, RateLimited, Result, Retry, Unavailable, webhooks
from sandq._core import SSEParser
from sandq.evals import TaskCount, estimate, pass_at_k


class WebhookSignatures(unittest.TestCase):
    def test_known_answer(self) -> None:
        # The same known answer as service.TestSignKnownAnswer (Go).
        self.assertEqual(webhooks.sign("whsec_test", "1700000000", b'{"id":"j1"}'),
                         "dc498648beb37ef9558bf34aa28aad5dd4ab1f611dbc1c741bf02cdd69d71603")

    def test_verify(self) -> None:
        body = b'{"id":"j1","status":"succeeded","stdout":"","stderr":""}'
        now = int(time.time())
        header = f"t={now},v1={webhooks.sign('s3cret', now, body)}"
        self.assertTrue(sandq.verify_webhook("s3cret", header, body))
        self.assertFalse(sandq.verify_webhook("other", header, body), "wrong secret")
        self.assertFalse(sandq.verify_webhook("s3cret", header, body + b" "), "tampered body")
        self.assertFalse(sandq.verify_webhook("s3cret", f"t={now - 301},v1={webhooks.sign('s3cret', now - 301, body)}", body),
                         "too old")
        self.assertFalse(sandq.verify_webhook("s3cret", "v1=" + webhooks.sign("s3cret", now, body), body), "no t")
        self.assertEqual(sandq.parse_webhook("s3cret", header, body).id, "j1")
        with self.assertRaises(sandq.InvalidSignature):
            sandq.parse_webhook("s3cret", header.replace("v1=", "v1=0"), body)


class PassAtK(unittest.TestCase):
    def test_values(self) -> None:
        self.assertAlmostEqual(pass_at_k(10, 3, 1), 0.3)
        self.assertAlmostEqual(pass_at_k(10, 3, 5), 1 - 21 / 252)  # 1 - C(7,5)/C(10,5)
        self.assertEqual(pass_at_k(5, 0, 2), 0.0)
        self.assertEqual(pass_at_k(5, 4, 2), 1.0)
        with self.assertRaises(ValueError):
            pass_at_k(3, 4, 1)

    def test_estimate(self) -> None:
        got, skipped = estimate({"a": TaskCount(4, 2), "b": TaskCount(4, 0), "c": TaskCount(0, 0)}, [1, 2, 5])
        self.assertAlmostEqual(got[1], (0.5 + 0) / 2)
        self.assertAlmostEqual(got[2], (1 - 1 / 6) / 2)
        self.assertEqual(skipped, [5])


class Parsing(unittest.TestCase):
    def test_sse(self) -> None:
        p = SSEParser()
        got = [p.line(x) for x in [": keep-alive", "", "id: 1-2", "event: output", 'data: {"a":', "data: 1}", "",
                                   "event: result", "data: {}", ""]]
        self.assertEqual([g for g in got if g], [("output", '{"a":\n1}', "1-2"), ("result", "{}", None)])

    def test_result(self) -> None:
        r = Result.from_dict({"id": "j", "status": "failed", "stdout": "AP8B", "stdout_encoding": "base64", "stderr": "",
                              "verdict": "wrong_answer", "score": 0, "cases": [{"verdict": "accepted", "cpu_ms": 3, "wall_ms": 4}],
                              "finished_at": "2025-01-02T03:04:05.123456789Z", "started_at": "0001-01-01T00:00:00Z",
                              "future_field": 1})
        self.assertEqual(r.stdout_bytes, b"\x00\xff\x01")
        self.assertTrue(r.final)
        self.assertFalse(r.ok)
        self.assertEqual(r.cases[0].cpu_ms, 3)
        self.assertIsInstance(r.score, float)
        assert r.finished_at is not None
        self.assertEqual(r.finished_at.year, 2025)
        self.assertIsNone(r.started_at, "Go's zero time is no time")
        self.assertEqual(r.raw["future_field"], 1)

    def test_job(self) -> None:
        j = sandq.Job(lang="python", code="x", limits=sandq.Limits(memory_mb=64),
                      files=[sandq.File("in/a.bin", data=b"\x00\x01")], tests=[sandq.TestCase(stdin="1\n", expected_stdout="1\n")])
        self.assertEqual(j.to_dict(), {"lang": "python", "code": "x", "limits": {"memory_mb": 64},
                                       "files": [{"path": "in/a.bin", "content_b64": "AAE="}],
                                       "tests": [{"stdin": "1\n", "expected_stdout": "1\n"}]})


class _Flaky(http.server.BaseHTTPRequestHandler):
    """Answers GET /v1/languages with 429 (Retry-After: 1), then 503
    (no Retry-After), then 200; and /always with 429."""
    hits: list[float] = []

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        _Flaky.hits.append(time.monotonic())
        n = len(_Flaky.hits)
        if self.path == "/v1/languages" and n == 1:
            self._problem(429, {"Retry-After": "1"})
        elif self.path == "/v1/languages" and n == 2:
            self._problem(503, {})
        elif self.path == "/v1/languages":
            body = json.dumps([{"name": "python"}]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self._problem(429, {"Retry-After": "1"})

    def _problem(self, code: int, headers: dict[str, str]) -> None:
        body = json.dumps({"status": code, "title": "x", "detail": "slow down",
                           "errors": [{"location": "quota", "value": "rate"}]}).encode()
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Type", "application/problem+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Retries(unittest.TestCase):
    def setUp(self) -> None:
        _Flaky.hits = []
        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}"
        self.retries: list[tuple[int, int, float]] = []

    def tearDown(self) -> None:
        self.srv.shutdown()
        self.srv.server_close()

    def retry(self, n: int = 5) -> Retry:
        return Retry(retries=n, backoff=0.05, on_retry=lambda a, e, d: self.retries.append((a, e.status, d)))

    def check_hits(self) -> None:
        self.assertEqual(len(_Flaky.hits), 3)
        self.assertGreaterEqual(_Flaky.hits[1] - _Flaky.hits[0], 1.0, "Retry-After: 1 was honored")
        self.assertEqual([(a, s) for a, s, _ in self.retries], [(1, 429), (2, 503)])

    def test_sync(self) -> None:
        langs = Client(self.url, "k", retry=self.retry()).languages()
        self.assertEqual(langs[0].name, "python")
        self.check_hits()

    def test_async(self) -> None:
        langs = asyncio.run(AsyncClient(self.url, "k", retry=self.retry()).languages())
        self.assertEqual(langs[0].name, "python")
        self.check_hits()

    def test_gives_up(self) -> None:
        with self.assertRaises(RateLimited) as cm:
            Client(self.url, "k", retry=self.retry(1)).get("always")  # GET /v1/jobs/always: 429 each time
        self.assertEqual(cm.exception.retry_after, 1.0)
        self.assertEqual(cm.exception.quota, "rate")
        self.assertEqual(len(_Flaky.hits), 2, "one attempt and one retry")
        with self.assertRaises(Unavailable):
            raise sandq._errors.error_for(503, {})


if __name__ == "__main__":
    unittest.main()
