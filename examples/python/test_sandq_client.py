"""Drives sandq_client against a running API (e2e/api_test.go runs it).

    SANDQ_API_URL=http://127.0.0.1:8080 SANDQ_API_KEY=sqk_... python3 test_sandq_client.py

It checks what it prints; any failure raises, and the exit status says so.
The session part needs a worker with a free session slot (--max-sessions);
SANDQ_SESSIONS=0 skips it.
"""

import hashlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sandq_client import ApiError, Client, SessionEnded, output_bytes  # noqa: E402


def main():
    c = Client(os.environ.get("SANDQ_API_URL", "http://127.0.0.1:8080"), os.environ.get("SANDQ_API_KEY"))
    n = int(os.environ.get("SANDQ_BATCH_JOBS", "200"))

    # One job, waited for.
    r = c.run({"lang": "python", "code": "print(6 * 7)"})
    assert r["status"] == "succeeded" and r["stdout"] == "42\n", r
    print("run:", r["status"], r["stdout"].strip())

    # Invalid jobs: problem details naming the field.
    try:
        c.submit({"lang": "python", "code": "x", "limits": {"memory_mb": 1 << 20}})
        raise AssertionError("an invalid job was accepted")
    except ApiError as e:
        assert e.status == 422 and e.errors[0]["location"] == "body.limits.memory_mb", e
        print("invalid:", e)

    # Live output, bytes exact.
    job = c.submit({"lang": "python", "stream": True,
                    "code": "import sys, time\nfor i in range(3):\n    print('line', i, flush=True)\n    time.sleep(0.1)\n"
                            "sys.stdout.buffer.write(bytes([0, 255, 1]))\n"})
    out, err, final = c.output(job["id"])
    assert out == b"line 0\nline 1\nline 2\n\x00\xff\x01", out
    assert final["status"] == "succeeded", final
    assert output_bytes(final["stdout"], final.get("stdout_encoding")) == out
    print("events:", len(out), "bytes live, exact")

    # A judged program: accepted on the first case, a wrong answer on the
    # second, the third skipped.
    r = c.judge("python", "a, b = map(int, input().split())\nprint(a + b if a != 2 else 5)",
                [{"stdin": "1 2\n", "expected_stdout": "3\n"}, {"stdin": "2 2\n", "expected_stdout": "4\n"},
                 {"stdin": "3 3\n", "expected_stdout": "6\n"}], limits={"cpu_ms": 1000})
    assert r["verdict"] == "wrong_answer" and r["status"] == "failed", r
    assert [x["verdict"] for x in r["cases"]] == ["accepted", "wrong_answer", "skipped"], r["cases"]
    assert r["cases"][1]["stdout"] == "5\n" and r["cases"][1]["expected"] == "4\n", r["cases"][1]
    print("judge:", r["verdict"], r["score"])

    # A batch of n jobs, results as they finish.
    created = c.batch([{"lang": "python", "code": f"print({i} * {i})", "tags": {"i": str(i)}} for i in range(n)])
    assert created["enqueued"] == n, created
    results = list(c.batch_results(created["id"]))
    ok = sum(1 for r in results if r["status"] == "succeeded" and r["stdout"] == f"{int(r['tags']['i']) ** 2}\n")
    progress = c.batch_progress(created["id"])
    assert progress["done"] == n, progress
    print(f"batch: {len(results)} jobs, {ok} succeeded")
    assert ok == n

    langs = [l["name"] for l in c.languages()]
    assert "python" in langs, langs

    if os.environ.get("SANDQ_SESSIONS", "1") != "0":
        check_session(c)
    print("OK")


def check_session(c):
    """A session: state kept over cells, a file up and down byte-exact,
    closed on leaving the with block."""
    with c.open_session("python", limits={"timeout_ms": 20_000}) as s:
        for code in ("x = 6", "y = x * 7"):
            r = s.exec(code)
            assert r["status"] == "ok", r
        r = s.exec("print(y)")
        assert r["status"] == "ok" and r["stdout"] == "42\n", r
        r = s.exec("1 / 0")
        assert r["status"] == "error" and r["error"]["name"] == "ZeroDivisionError", r
        data = bytes(range(256)) * 1000 + b"\x00\xff"
        s.upload("in/blob.bin", data)
        r = s.exec("import hashlib\nprint(hashlib.sha256(open('in/blob.bin', 'rb').read()).hexdigest())")
        assert r["stdout"] == hashlib.sha256(data).hexdigest() + "\n", r
        assert s.download("in/blob.bin") == data
        entries = {f["path"]: f for f in s.files()}
        assert entries["in/blob.bin"]["size"] == len(data), entries
        try:
            s.upload("../escape.txt", b"x")
            raise AssertionError("a path outside the work dir was accepted")
        except ApiError as e:
            assert e.status == 422, e
        assert s.info()["execution_count"] >= 5
        sid = s.id
    info = c.session(sid).info()
    assert info["state"] == "closed", info
    try:
        s.exec("print(y)")
        raise AssertionError("a closed session ran a cell")
    except SessionEnded as e:
        assert e.state == "closed", e
    print("session:", sid, "3 cells of state,", len(data), "bytes up and down, closed")


if __name__ == "__main__":
    main()
