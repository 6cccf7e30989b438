"""Tests against a real sandq API and worker (e2e/api_test.go's
TestAPIPythonClient runs them with the package installed in a fresh
venv). They need, in the environment:

    SANDQ_API_URL, SANDQ_API_KEY   the API and a key of a tenant of its own
    SANDQ_API_SLOW_KEY             a key made with --rate 1 (the 429 test)
    SANDQ_BATCH_JOBS               the big batch's size (default 200)

and an API started with --webhook-allow-hosts 127.0.0.1 and an artifact
store shared with the worker. Without SANDQ_API_URL they fail: nothing
here is skipped.
"""

from __future__ import annotations

import asyncio
import hashlib
import http.server
import os
import queue
import tempfile
import threading
import time
import unittest
from typing import Any

import sandq
from sandq import (AsyncClient, Client, Conflict, File, Invalid, Job, Limits, OutputEvent, RateLimited, ResultEvent,
                   Retry, SessionEnded, StatusEvent, TestCase)
from sandq.evals import pass_at_k

URL = os.environ.get("SANDQ_API_URL", "")
KEY = os.environ.get("SANDQ_API_KEY", "")


def client(**kw: Any) -> Client:
    return Client(URL, KEY, **kw)


class Base(unittest.TestCase):
    def setUp(self) -> None:
        if not URL or not KEY:
            self.fail("SANDQ_API_URL and SANDQ_API_KEY must name a running API and a key")
        self.c = client()


class Jobs(Base):
    def test_run(self) -> None:
        r = self.c.run(Job(lang="python", code="print(6 * 7)"))
        self.assertEqual((r.status, r.stdout, r.exit_code), ("succeeded", "42\n", 0), r)
        self.assertTrue(r.ok and r.final)
        self.assertGreater(r.usage.wall_ms, 0)
        assert r.finished_at is not None and r.enqueued_at is not None
        self.assertLessEqual(r.enqueued_at, r.finished_at)
        self.assertEqual(self.c.get(r.id).stdout, "42\n")
        print("run:", r.status, r.stdout.strip())

    def test_submit_wait_dict(self) -> None:
        job = self.c.submit({"lang": "python", "code": "import time; time.sleep(1); print('late')"})
        self.assertIn(job.status, ("queued", "running"))
        r = self.c.wait(job.id, timeout=120)
        self.assertEqual(r.stdout, "late\n")

    def test_invalid(self) -> None:
        with self.assertRaises(Invalid) as cm:
            self.c.submit(Job(lang="python", code="x", limits=Limits(memory_mb=1 << 20)))
        e = cm.exception
        self.assertEqual((e.status, e.errors[0]["location"]), (422, "body.limits.memory_mb"), e)
        print("invalid:", e)

    def test_events_exact_bytes(self) -> None:
        code = ("import sys, time\nfor i in range(3):\n    print('line', i, flush=True)\n    time.sleep(0.1)\n"
                "sys.stdout.buffer.write(bytes([0, 255, 1]))\n")
        events = list(self.c.stream(Job(lang="python", code=code)))
        kinds = {type(e) for e in events}
        self.assertTrue({StatusEvent, OutputEvent, ResultEvent} <= kinds, kinds)
        self.assertIsInstance(events[-1], ResultEvent)
        out = b"".join(e.data_bytes for e in events if isinstance(e, OutputEvent) and e.step == "run" and e.stream == "stdout")
        self.assertEqual(out, b"line 0\nline 1\nline 2\n\x00\xff\x01")
        final = events[-1]
        assert isinstance(final, ResultEvent)
        self.assertEqual(final.result.stdout_bytes, out)
        # Resuming after the first output: nothing repeated.
        first = next(e for e in events if isinstance(e, OutputEvent) and e.id)
        again = [e for e in self.c.events(final.result.id, last_event_id=first.id) if isinstance(e, OutputEvent)]
        self.assertEqual(b"".join(e.data_bytes for e in again if e.stream == "stdout"), out[len(first.data_bytes):])
        print("events:", len(out), "bytes live, exact")

    def test_judge(self) -> None:
        r = self.c.judge("python", "a, b = map(int, input().split())\nprint(a + b if a != 2 else 5)",
                         [TestCase(stdin="1 2\n", expected_stdout="3\n"), {"stdin": "2 2\n", "expected_stdout": "4\n"},
                          TestCase(stdin="3 3\n", expected_stdout="6\n")], limits=Limits(cpu_ms=1000))
        self.assertEqual((r.verdict, r.status), ("wrong_answer", "failed"), r)
        self.assertEqual([x.verdict for x in r.cases], ["accepted", "wrong_answer", "skipped"])
        self.assertEqual((r.cases[1].stdout, r.cases[1].expected), ("5\n", "4\n"))
        self.assertIsNotNone(r.score)
        print("judge:", r.verdict, r.score)

    def test_cancel(self) -> None:
        job = self.c.submit(Job(lang="python", code="import time\nprint('started', flush=True)\ntime.sleep(120)", stream=True))
        for ev in self.c.events(job.id):
            if isinstance(ev, OutputEvent) and b"started" in ev.data_bytes:
                break
        t0 = time.monotonic()
        self.c.cancel(job.id)
        r = self.c.wait(job.id, timeout=60)
        self.assertEqual(r.status, "canceled", r)
        self.assertLess(time.monotonic() - t0, 60)
        with self.assertRaises(Conflict):
            self.c.cancel(job.id)
        print("cancel:", r.status, f"{time.monotonic() - t0:.1f}s")

    def test_artifacts(self) -> None:
        blob = bytes(range(256)) * 64
        code = "import os\nos.makedirs('out', exist_ok=True)\nopen('out/data.bin', 'wb').write(bytes(range(256)) * 64)\n"
        r = self.c.run(Job(lang="python", code=code, output_files=["out/data.bin"]))
        self.assertEqual(r.status, "succeeded", r)
        arts = self.c.artifacts(r.id)
        self.assertEqual([(a.name, a.size) for a in arts], [("out/data.bin", len(blob))])
        self.assertEqual(self.c.download(r.id, "out/data.bin"), blob)
        with tempfile.TemporaryDirectory() as d:
            paths = self.c.save_artifacts(r.id, d)
            self.assertEqual(len(paths), 1)
            with open(os.path.join(d, "out", "data.bin"), "rb") as f:
                self.assertEqual(f.read(), blob)
        with self.assertRaises(sandq.NotFound):
            self.c.download(r.id, "nope.bin")
        print("artifacts:", len(blob), "bytes down, exact")

    def test_languages(self) -> None:
        self.assertIn("python", [lang.name for lang in self.c.languages()])


class Batches(Base):
    def test_batch(self) -> None:
        n = int(os.environ.get("SANDQ_BATCH_JOBS", "200"))
        created = self.c.batch([Job(lang="python", code=f"print({i} * {i})", tags={"i": str(i)}) for i in range(n)]
                               + [{"lang": "python", "code": "x", "limits": {"memory_mb": 1 << 20}}])
        self.assertEqual((created.total, created.enqueued), (n + 1, n), created.items[-1])
        bad = created.items[-1]
        assert bad.error is not None
        self.assertEqual((bad.index, bad.error.status), (n, 422))
        results = list(self.c.batch_results(created.id))
        ok = sum(1 for r in results if r.status == "succeeded" and r.stdout == f"{int(r.tags['i']) ** 2}\n")
        progress = self.c.batch_progress(created.id)
        self.assertEqual((progress.total, progress.done, progress.counts.get("succeeded")), (n, n, n), progress)
        print(f"batch: {len(results)} jobs, {ok} succeeded")
        self.assertEqual(ok, n)

    def test_evaluate(self) -> None:
        # Task "add": samples 0 and 1 right, 2 wrong; task "neg": sample 0
        # right, 1 and 2 raise.
        add = ["print(sum(map(int, input().split())))"] * 2 + ["print(0)"]
        neg = ["print(-int(input()))", "raise SystemExit(1)", "1/0"]
        samples = {
            "add": [Job(lang="python", code=c, tests=[TestCase(stdin="1 2\n", expected_stdout="3\n")]) for c in add],
            "neg": [Job(lang="python", code=c, tests=[TestCase(stdin="5\n", expected_stdout="-5\n")]) for c in neg],
        }
        rep = self.c.evaluate(samples, ks=[1, 2, 5])
        self.assertEqual({k: (v.n, v.c) for k, v in rep.tasks.items()}, {"add": (3, 2), "neg": (3, 1)})
        self.assertAlmostEqual(rep.pass_at["pass@1"], (2 / 3 + 1 / 3) / 2)
        self.assertAlmostEqual(rep.pass_at["pass@2"], (pass_at_k(3, 2, 2) + pass_at_k(3, 1, 2)) / 2)
        self.assertEqual(rep.skipped_k, [5])
        self.assertEqual(rep.verdicts.get("accepted"), 3)
        self.assertEqual(sum(rep.verdicts.values()), 6)
        print("eval:", rep.pass_at, rep.verdicts)


class Sessions(Base):
    def test_session(self) -> None:
        with self.c.open_session("python", limits=Limits(timeout_ms=20_000),
                                 files=[File("in/seed.txt", data=b"6")]) as s:
            for code in ("x = int(open('in/seed.txt').read())", "y = x * 7"):
                self.assertEqual(s.exec(code).status, "ok")
            r = s.exec("print(y)")
            self.assertEqual((r.status, r.stdout), ("ok", "42\n"), r)
            r = s.exec("y + 1")
            self.assertEqual(r.results[0]["text/plain"], "43")
            r = s.exec("1 / 0")
            assert r.error is not None
            self.assertEqual((r.status, r.error.name), ("error", "ZeroDivisionError"))
            data = bytes(range(256)) * 1000 + b"\x00\xff"
            s.upload("in/blob.bin", data)
            r = s.exec("import hashlib\nprint(hashlib.sha256(open('in/blob.bin', 'rb').read()).hexdigest())")
            self.assertEqual(r.stdout, hashlib.sha256(data).hexdigest() + "\n")
            self.assertEqual(s.download("in/blob.bin"), data)
            entries = {f.path: f for f in s.files()}
            self.assertEqual(entries["in/blob.bin"].size, len(data))
            with self.assertRaises(Invalid):
                s.upload("../escape.txt", b"x")
            self.assertGreaterEqual(s.refresh().execution_count, 5)
            self.assertIn(s.id, [i.id for i in self.c.sessions()])
            sid = s.id
        self.assertEqual(self.c.session(sid).info.state, "closed")
        with self.assertRaises(SessionEnded) as cm:
            s.exec("print(y)")
        self.assertEqual(cm.exception.state, "closed")
        print("session:", sid, "cells of state,", len(data), "bytes up and down, closed")


class RateLimits(unittest.TestCase):
    def test_429_retried(self) -> None:
        key = os.environ.get("SANDQ_API_SLOW_KEY", "")
        if not URL or not key:
            self.fail("SANDQ_API_SLOW_KEY must be a key with --rate 1")
        # Without retries: the second request within the second is 429,
        # with Retry-After and the quota named.
        bare = Client(URL, key, retry=Retry(retries=0))
        with self.assertRaises(RateLimited) as cm:
            for _ in range(5):
                bare.languages()
        self.assertEqual(cm.exception.quota, "rate")
        assert cm.exception.retry_after is not None
        self.assertGreaterEqual(cm.exception.retry_after, 1)
        # With retries: every request gets through, after waiting.
        seen: list[int] = []
        patient = Client(URL, key, retry=Retry(retries=10, on_retry=lambda a, e, d: seen.append(e.status)))
        for _ in range(4):
            self.assertTrue(patient.languages())
        self.assertGreaterEqual(len(seen), 2, "rate 1/s: some of 4 quick requests were refused")
        self.assertEqual(set(seen), {429})

        async def several() -> int:
            a = AsyncClient(URL, key, retry=Retry(retries=10, on_retry=lambda a, e, d: seen.append(e.status)))
            got = await asyncio.gather(*(a.languages() for _ in range(3)))
            return len(got)
        before = len(seen)
        self.assertEqual(asyncio.run(several()), 3)
        self.assertGreaterEqual(len(seen) - before, 2, "3 concurrent requests at 1/s: at least 2 refused then retried")
        print("retries:", len(seen), "429s waited out")


class _Hook(http.server.BaseHTTPRequestHandler):
    got: queue.Queue[tuple[dict[str, str], bytes]] = queue.Queue()

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        _Hook.got.put(({k.lower(): v for k, v in self.headers.items()}, body))
        self.send_response(204)
        self.end_headers()


class Webhooks(Base):
    def test_webhook(self) -> None:
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        try:
            url = f"http://127.0.0.1:{srv.server_address[1]}/hook"
            r = self.c.run(Job(lang="python", code="print('hooked')", callback_url=url))
            headers, body = _Hook.got.get(timeout=60)
        finally:
            srv.shutdown()
            srv.server_close()
        secret = self.c.webhook_secret()
        sig = headers[sandq.webhooks.SIGNATURE_HEADER.lower()]
        self.assertTrue(sandq.verify_webhook(secret, sig, body))
        delivered = sandq.parse_webhook(secret, sig, body)
        self.assertEqual((delivered.id, delivered.stdout), (r.id, "hooked\n"))
        self.assertFalse(sandq.verify_webhook(secret, sig, body.replace(b"hooked", b"hacked")))
        self.assertFalse(sandq.verify_webhook(secret + "x", sig, body))
        for _ in range(50):  # the API records the delivery just after it
            w = self.c.get(r.id).webhook
            if w is not None and w.state == "delivered":
                break
            time.sleep(0.1)
        self.assertEqual((w.state if w else None, w.last_status_code if w else None), ("delivered", 204))
        print("webhook: delivered, signature verified")


class Async(Base):
    def test_async(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        async with AsyncClient(URL, KEY) as a:
            # Concurrent runs.
            rs = await asyncio.gather(*(a.run(Job(lang="python", code=f"print({i} + 1)")) for i in range(6)))
            self.assertEqual([r.stdout for r in rs], [f"{i + 1}\n" for i in range(6)])
            # Live output.
            out, err, final = await a.output((await a.submit(
                Job(lang="python", code="import sys\nprint('o', flush=True)\nprint('e', file=sys.stderr)", stream=True))).id)
            self.assertEqual((out, err, final.status), (b"o\n", b"e\n", "succeeded"))
            kinds = [type(e).__name__ async for e in a.stream({"lang": "python", "code": "print(1)"})]
            self.assertEqual(kinds[-1], "ResultEvent")
            # A batch, its results streamed.
            b = await a.batch([Job(lang="python", code=f"print({i})") for i in range(10)])
            got = sorted([int(r.stdout) async for r in a.batch_results(b.id)])
            self.assertEqual(got, list(range(10)))
            # Cancel.
            job = await a.submit(Job(lang="python", code="import time; time.sleep(120)"))
            await a.cancel(job.id)
            self.assertEqual((await a.wait(job.id, timeout=60)).status, "canceled")
            # A session.
            async with await a.open_session("python") as s:
                self.assertEqual((await s.exec("z = 5")).status, "ok")
                self.assertEqual((await s.exec("print(z * 2)")).stdout, "10\n")
                await s.upload("a.txt", b"async")
                self.assertEqual(await s.download("a.txt"), b"async")
            self.assertEqual(s.info.state, "closed")
            # Errors come back typed.
            with self.assertRaises(sandq.NotFound):
                await a.get("no-such-job")
        print("async: runs, output, batch, cancel, session")


if __name__ == "__main__":
    unittest.main()
