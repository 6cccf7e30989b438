"""A client for sandq's HTTP API, with nothing but Python's standard library.

    from sandq_client import Client

    c = Client("http://127.0.0.1:8080", api_key="sqk_...")
    r = c.run({"lang": "python", "code": "print(6 * 7)"})   # waits; returns the Result
    print(r["status"], r["stdout"])

    job = c.submit({"lang": "python", "code": "...", "stream": True})
    for event, data in c.events(job["id"]):                 # status, output, result
        ...

    out = c.batch([{"lang": "python", "code": "print(1)"}] * 100)
    for result in c.batch_results(out["id"]):               # as the jobs finish
        ...

    with c.open_session("python", limits={"memory_mb": 512}) as s:   # closed on exit
        s.exec("x = 6")
        print(s.exec("print(x * 7)")["stdout"])             # state kept: 42
        s.upload("data/in.csv", b"a,b\n1,2\n")
        report = s.download("out/report.txt")

Errors come back as ApiError with the problem details (RFC 9457) the API
sent: status, title, detail and errors (each with a location such as
"body.limits.memory_mb"); SessionEnded (an ApiError, 410) for a session
that has ended, with its state and reason.
"""

import base64
import json
import time
import urllib.error
import urllib.parse
import urllib.request

__all__ = ["Client", "Session", "ApiError", "SessionEnded", "output_bytes"]


class ApiError(Exception):
    """An error answer of the API: its problem details."""

    def __init__(self, status, problem):
        self.status = status
        self.problem = problem or {}
        self.detail = self.problem.get("detail") or self.problem.get("title") or ""
        self.errors = self.problem.get("errors") or []
        where = "; ".join(f"{e.get('location')}: {e.get('message')}" for e in self.errors)
        super().__init__(f"{status}: {self.detail}" + (f" ({where})" if where else ""))


class SessionEnded(ApiError):
    """410: the session has ended. state is closed, expired, lost or oom;
    reason says why."""

    def __init__(self, status, problem):
        super().__init__(status, problem)
        first = self.errors[0] if self.errors else {}
        self.state = first.get("value") or ""
        self.reason = first.get("message") or ""


def output_bytes(data, encoding):
    """The exact bytes of a stream field: text, or base64 when encoding says so."""
    if encoding == "base64":
        return base64.b64decode(data)
    return data.encode("utf-8")


class Client:
    """A sandq API client. Thread-safe: it keeps no per-request state."""

    def __init__(self, url="http://127.0.0.1:8080", api_key=None, timeout=90):
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout

    # -- plumbing ---------------------------------------------------------

    def _request(self, method, path, body=None, headers=None, raw=False, stream=False, timeout=None):
        data = None
        hdrs = {"Accept": "application/json"}
        if self.api_key:
            hdrs["Authorization"] = "Bearer " + self.api_key
        if body is not None:
            if isinstance(body, (bytes, bytearray)):
                data = bytes(body)
            else:
                data = json.dumps(body).encode("utf-8")
                hdrs["Content-Type"] = "application/json"
        hdrs.update(headers or {})
        req = urllib.request.Request(self.url + path, data=data, headers=hdrs, method=method)
        try:
            resp = urllib.request.urlopen(req, timeout=timeout or self.timeout)
        except urllib.error.HTTPError as e:
            payload = e.read()
            try:
                problem = json.loads(payload)
            except ValueError:
                problem = {"detail": payload.decode("utf-8", "replace")}
            raise (SessionEnded if e.code == 410 else ApiError)(e.code, problem) from None
        if stream:
            return resp
        with resp:
            payload = resp.read()
            if raw:
                return resp.status, resp.headers, payload
            return resp.status, json.loads(payload) if payload else None

    # -- jobs -------------------------------------------------------------

    def submit(self, job, wait=None):
        """Enqueue a job (a dict in the job format; callback_url allowed).
        With wait (seconds), the answer is the final Result if the job ended
        in time. Returns the job's view (its Result so far)."""
        q = f"?wait={int(wait)}s" if wait else ""
        _, view = self._request("POST", "/v1/jobs" + q, job, timeout=(wait or 0) + self.timeout)
        return view

    def get(self, job_id, wait=None):
        """The job's view; with wait (seconds), a long-poll for its end."""
        q = f"?wait={int(wait)}s" if wait else ""
        _, view = self._request("GET", "/v1/jobs/" + urllib.parse.quote(job_id, safe="") + q,
                                timeout=(wait or 0) + self.timeout)
        return view

    def wait(self, job_id, timeout=None, poll=55):
        """Block until the job ends (long-polls of at most poll seconds) and
        return its final Result."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = poll if deadline is None else max(1, min(poll, deadline - time.monotonic()))
            view = self.get(job_id, wait=left)
            if view["status"] not in ("queued", "running"):
                return view
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {job_id} is still {view['status']}")

    def run(self, job, timeout=None):
        """Submit a job and wait for its final Result."""
        view = self.submit(job, wait=min(55, timeout or 55))
        if view["status"] in ("queued", "running"):
            view = self.wait(view["id"], timeout=timeout)
        return view

    def judge(self, lang, code, tests, compare=None, checker=None,
              stop_on_first_failure=None, limits=None, timeout=None, **job):
        """Judge a program by standard input and expected output: compile
        it once, run it once per test case (dicts with "stdin" and
        "expected_stdout"), and return the final Result, whose "verdict"
        is "accepted" when every case is ("cases" has each case's verdict,
        "score" the share accepted). compare is "lines" (the default),
        "exact", "tokens" or "float"; checker a {"lang", "code"} program
        run with the files input, output and answer, exiting 0 to accept.
        limits may set "cpu_ms", each case's CPU time."""
        spec = {}
        if compare is not None:
            spec["compare"] = compare
        if checker is not None:
            spec["checker"] = checker
        if stop_on_first_failure is not None:
            spec["stop_on_first_failure"] = stop_on_first_failure
        body = dict(job, lang=lang, code=code, tests=list(tests))
        if spec:
            body["judge"] = spec
        if limits:
            body["limits"] = limits
        return self.run(body, timeout=timeout)

    def cancel(self, job_id):
        """Cancel a job; returns its view."""
        _, view = self._request("POST", "/v1/jobs/" + urllib.parse.quote(job_id, safe="") + "/cancel")
        return view

    def events(self, job_id, last_event_id=None):
        """Follow a job: yields (event, data) for each Server-Sent Event:
        ("status", {"status"}), ("output", {"step", "stream", "offset",
        "data", "encoding", ...}), and last ("result", the job's view).
        Reconnects after a dropped connection with Last-Event-ID, so no
        output is repeated or lost."""
        last = last_event_id
        while True:
            headers = {"Accept": "text/event-stream"}
            if last:
                headers["Last-Event-ID"] = last
            resp = self._request("GET", "/v1/jobs/" + urllib.parse.quote(job_id, safe="") + "/events",
                                 headers=headers, stream=True, timeout=self.timeout)
            event, data, ident = None, [], None
            try:
                with resp:
                    for raw in resp:
                        line = raw.decode("utf-8").rstrip("\r\n")
                        if line == "":
                            if event:
                                payload = json.loads("\n".join(data))
                                if ident:
                                    last = ident
                                yield event, payload
                                if event == "result":
                                    return
                            event, data, ident = None, [], None
                        elif line.startswith(":"):
                            continue
                        elif line.startswith("event:"):
                            event = line[6:].strip()
                        elif line.startswith("data:"):
                            data.append(line[5:].lstrip(" "))
                        elif line.startswith("id:"):
                            ident = line[3:].strip()
            except (OSError, ValueError):
                pass  # dropped: reconnect, resuming after the last output
            time.sleep(0.2)

    def output(self, job_id):
        """Follow a job's live output; returns (stdout bytes, stderr bytes,
        final view)."""
        out, err = bytearray(), bytearray()
        for event, data in self.events(job_id):
            if event == "output" and data.get("step") == "run":
                (out if data["stream"] == "stdout" else err).extend(output_bytes(data["data"], data.get("encoding")))
            elif event == "result":
                return bytes(out), bytes(err), data

    # -- artifacts --------------------------------------------------------

    def artifacts(self, job_id):
        """The job's artifacts: name, kind, size, content_type, url."""
        _, body = self._request("GET", "/v1/jobs/" + urllib.parse.quote(job_id, safe="") + "/artifacts")
        return body["artifacts"]

    def download(self, job_id, name):
        """An artifact's bytes (following the API's redirect to the store)."""
        path = "/v1/jobs/" + urllib.parse.quote(job_id, safe="") + "/artifacts/" + urllib.parse.quote(name, safe="")
        _, _, payload = self._request("GET", path, raw=True)
        return payload

    # -- batches ----------------------------------------------------------

    def batch(self, jobs, batch_id=None):
        """Enqueue many jobs at once. Returns {"id", "total", "enqueued",
        "items": [{"index", "id", "status" | "error"}]}."""
        q = "?id=" + urllib.parse.quote(batch_id, safe="") if batch_id else ""
        _, body = self._request("POST", "/v1/batches" + q, list(jobs))
        return body

    def batch_progress(self, batch_id):
        """{"id", "total", "done", "counts": {status: n}}."""
        _, body = self._request("GET", "/v1/batches/" + urllib.parse.quote(batch_id, safe=""))
        return body

    def batch_results(self, batch_id):
        """Yields the batch's final Results as its jobs finish."""
        resp = self._request("GET", "/v1/batches/" + urllib.parse.quote(batch_id, safe="") + "/results",
                             stream=True, timeout=None)
        with resp:
            for raw in resp:
                if raw.strip():
                    yield json.loads(raw)

    # -- sessions ---------------------------------------------------------

    def open_session(self, lang, **spec):
        """Open a session: a live interpreter in one container, run cell by
        cell, its state kept from cell to cell. spec takes the session's
        fields: id, limits (dict; timeout_ms is each cell's default),
        libraries (list), files (dicts with path and content_b64, or path
        and data as bytes), env (dict), idle_ttl_seconds (default 600),
        lifetime_seconds (default 3600). Returns once the interpreter is
        ready (minutes with libraries). A Session is a context manager that
        closes the session on exit. Raises ApiError 503 when no worker has a
        free session slot (retry later)."""
        body = dict(spec, lang=lang)
        files = []
        for f in body.get("files") or []:
            f = dict(f)
            if "data" in f:
                f["content_b64"] = base64.b64encode(f.pop("data")).decode("ascii")
            files.append(f)
        if files:
            body["files"] = files
        wait = 900 if body.get("libraries") else 150
        _, info = self._request("POST", "/v1/sessions", body, timeout=wait + self.timeout)
        return Session(self, info)

    def session(self, session_id):
        """A Session for an existing session of this key's tenant."""
        _, info = self._request("GET", "/v1/sessions/" + urllib.parse.quote(session_id, safe=""))
        return Session(self, info)

    def sessions(self):
        """The tenant's sessions (their records), newest first."""
        _, body = self._request("GET", "/v1/sessions")
        return body["sessions"]

    # -- misc -------------------------------------------------------------

    def languages(self):
        _, body = self._request("GET", "/v1/languages")
        return body

    def webhook_secret(self):
        _, body = self._request("GET", "/v1/webhook-secret")
        return body["secret"]

    @staticmethod
    def verify_webhook(secret, signature_header, body, tolerance=300):
        """Check a Sandq-Signature header ("t=<unix>,v1=<hex>") against the
        raw body of a webhook request; False if it does not match or is
        older than tolerance seconds."""
        import hashlib
        import hmac
        parts = dict(p.split("=", 1) for p in signature_header.split(",") if "=" in p)
        t, v1 = parts.get("t", ""), parts.get("v1", "")
        if not t.isdigit() or abs(time.time() - int(t)) > tolerance:
            return False
        mac = hmac.new(secret.encode(), t.encode() + b"." + body, hashlib.sha256).hexdigest()
        return hmac.compare_digest(mac, v1)


class Session:
    """One session of a Client (see Client.open_session). Its methods raise
    SessionEnded once the session has ended, and ApiError 409 while another
    cell runs (one at a time)."""

    def __init__(self, client, info):
        self.client = client
        self.id = info["id"]
        self.last_info = info

    def __repr__(self):
        return f"Session({self.id!r})"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            self.close()
        except ApiError:
            pass  # gone already
        return False

    def _path(self, suffix=""):
        return "/v1/sessions/" + urllib.parse.quote(self.id, safe="") + suffix

    def _file_path(self, path):
        # Slashes escaped: the API takes them so, and no proxy or router
        # cleans ".." out of the path before the API refuses it.
        return self._path("/files/" + urllib.parse.quote(path, safe=""))

    def exec(self, code, timeout_ms=None):
        """Run code as a cell and return its CellResult: status ("ok",
        "error", "timeout", or "session_ended" when the interpreter died
        during it), stdout, stderr, results (displayed values as MIME
        bundles: type to content, binary types in base64), error ({"name",
        "value", "traceback"}), execution_count, session (its state after).
        timeout_ms bounds the cell (default: the session's)."""
        body = {"code": code}
        if timeout_ms:
            body["timeout_ms"] = int(timeout_ms)
        limit = timeout_ms or (self.last_info.get("limits") or {}).get("timeout_ms") or 600_000
        _, result = self.client._request("POST", self._path("/cells"), body, timeout=limit / 1000 + 30 + self.client.timeout)
        return result

    def interrupt(self):
        """Interrupt the running cell, if any (KeyboardInterrupt in Python)."""
        _, self.last_info = self.client._request("POST", self._path("/interrupt"))
        return self.last_info

    def upload(self, path, data):
        """Write data (bytes, at most 16 MiB) to path in the work dir."""
        self.client._request("PUT", self._file_path(path), bytes(data),
                             headers={"Content-Type": "application/octet-stream"})

    def download(self, path):
        """The bytes of a regular file of the work dir."""
        _, _, payload = self.client._request("GET", self._file_path(path), raw=True)
        return payload

    def files(self, dir=""):
        """The files and directories under dir (default: the work dir),
        recursively: dicts with path, size, dir, mode, mod_time."""
        q = "?dir=" + urllib.parse.quote(dir, safe="") if dir else ""
        _, body = self.client._request("GET", self._path("/files") + q)
        return body["files"]

    def info(self):
        """The session's record: state, reason, execution_count, times."""
        _, self.last_info = self.client._request("GET", self._path())
        return self.last_info

    def close(self):
        """Close the session (its container is removed); returns its final
        record. Closing an ended session is not an error."""
        _, self.last_info = self.client._request("DELETE", self._path())
        return self.last_info
