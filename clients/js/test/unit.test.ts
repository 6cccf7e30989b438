// Unit tests: no API needed. Webhook signatures against vectors the Go
// server's service.Sign computed, the SSE parser, Retry-After, and the
// retry policy against a local fake server.
import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { test } from "node:test";

import { ApiError, Client, outputBytes, parseRetryAfter, parseSse, retryable, signWebhook, verifyWebhook, type RetryInfo } from "@sandq/client";

// Computed by the API's own service.Sign (Go) for this secret, t and body.
const VECTOR = {
  secret: "whsec_test_0123456789",
  t: "1767225600",
  body: '{"id":"j1","status":"succeeded","stdout":"42\\n","stderr":""}',
  v1: "3613bd70ebdfbdc6168f590a757dcd25bc1bfe198d2bf1ce3b623bd3fa35cf70",
};

test("webhook: a signature computed by the server verifies", async () => {
  const header = `t=${VECTOR.t},v1=${VECTOR.v1}`;
  const now = Number(VECTOR.t) + 10;
  assert.equal(await signWebhook(VECTOR.secret, VECTOR.t, VECTOR.body), VECTOR.v1);
  assert.equal(await verifyWebhook(VECTOR.secret, header, VECTOR.body, { now }), true);
  assert.equal(await verifyWebhook(VECTOR.secret, header, new TextEncoder().encode(VECTOR.body), { now }), true, "bytes as well as text");
  assert.equal(await Client.verifyWebhook(VECTOR.secret, header, VECTOR.body, { now }), true);
});

test("webhook: a signature the Go test computed at run time verifies", async () => {
  // e2e/jsclient_test.go signs a fresh body with service.Sign and passes it here.
  const raw = process.env.SANDQ_WEBHOOK_VECTOR;
  assert.ok(raw, "SANDQ_WEBHOOK_VECTOR is not set (the Go e2e test sets it)");
  const v = JSON.parse(raw) as { secret: string; t: string; body: string; v1: string };
  assert.equal(await verifyWebhook(v.secret, `t=${v.t},v1=${v.v1}`, v.body, { now: Number(v.t) }), true);
  assert.equal(await signWebhook(v.secret, v.t, v.body), v.v1);
});

test("webhook: a changed body, secret, time or header is refused", async () => {
  const now = Number(VECTOR.t);
  const header = `t=${VECTOR.t},v1=${VECTOR.v1}`;
  assert.equal(await verifyWebhook(VECTOR.secret, header, VECTOR.body.replace("42", "43"), { now }), false, "body");
  assert.equal(await verifyWebhook("whsec_other", header, VECTOR.body, { now }), false, "secret");
  assert.equal(await verifyWebhook(VECTOR.secret, `t=${now + 1},v1=${VECTOR.v1}`, VECTOR.body, { now }), false, "t is signed");
  assert.equal(await verifyWebhook(VECTOR.secret, header, VECTOR.body, { now: now + 301 }), false, "too old");
  assert.equal(await verifyWebhook(VECTOR.secret, header, VECTOR.body, { now: now + 301, toleranceSeconds: 600 }), true, "tolerance");
  for (const bad of ["", "garbage", `t=${VECTOR.t}`, `v1=${VECTOR.v1}`, `t=x,v1=${VECTOR.v1}`, `t=${VECTOR.t},v1=zz`, `t=${VECTOR.t},v1=${VECTOR.v1.slice(2)}`]) {
    assert.equal(await verifyWebhook(VECTOR.secret, bad, VECTOR.body, { now }), false, bad);
  }
  assert.equal(await verifyWebhook(VECTOR.secret, null, VECTOR.body, { now }), false);
});

async function* chunks(...parts: string[]): AsyncGenerator<Uint8Array> {
  const enc = new TextEncoder();
  for (const p of parts) yield enc.encode(p);
}

test("SSE: messages split anywhere, CRLF, comments, multi-line data, ids", async () => {
  const text = ': keep-alive\r\n\r\nid: 1-0\r\nevent: output\r\ndata: {"a":\r\ndata: 1}\r\n\r\nevent: status\ndata:{"status":"running"}\n\nevent: result\rdata: {}\r\r';
  for (let split = 0; split < text.length; split++) {
    const got = [];
    for await (const m of parseSse(chunks(text.slice(0, split), text.slice(split)))) got.push(m);
    assert.deepEqual(
      got,
      [
        { event: "output", data: '{"a":\n1}', id: "1-0" },
        { event: "status", data: '{"status":"running"}' },
        { event: "result", data: "{}" },
      ],
      `split at ${split}`,
    );
  }
});

test("outputBytes: text and base64", () => {
  assert.deepEqual(outputBytes("héllo\n"), new TextEncoder().encode("héllo\n"));
  assert.deepEqual(outputBytes("AP8B", "base64"), new Uint8Array([0, 255, 1]));
});

test("Retry-After: seconds and HTTP dates", () => {
  assert.equal(parseRetryAfter("3"), 3000);
  assert.equal(parseRetryAfter(null), undefined);
  assert.equal(parseRetryAfter("soon"), undefined);
  const now = Date.parse("Wed, 21 Oct 2026 07:28:00 GMT");
  assert.equal(parseRetryAfter("Wed, 21 Oct 2026 07:28:05 GMT", now), 5000);
  assert.equal(retryable(429, "POST", undefined), true);
  assert.equal(retryable(503, "POST", 1000), true);
  assert.equal(retryable(503, "POST", undefined), false, "a POST may have done its work");
  assert.equal(retryable(503, "GET", undefined), true);
  assert.equal(retryable(500, "GET", undefined), false);
  assert.equal(retryable(422, "POST", undefined), false);
});

/** A local server answering each request with the next of answers; it records what it got. */
async function fakeServer(answers: ((req: IncomingMessage, res: ServerResponse) => void)[]) {
  const got: { method: string; url: string; auth: string | undefined; body: string; at: number }[] = [];
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (c: Buffer) => (body += c.toString()));
    req.on("end", () => {
      got.push({ method: req.method ?? "", url: req.url ?? "", auth: req.headers.authorization, body, at: Date.now() });
      const answer = answers[Math.min(got.length - 1, answers.length - 1)]!;
      answer(req, res);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { url, got, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

function problem(status: number, detail: string, headers: Record<string, string> = {}) {
  return (_req: IncomingMessage, res: ServerResponse) => {
    res.writeHead(status, { "Content-Type": "application/problem+json", ...headers });
    res.end(JSON.stringify({ title: "x", status, detail, errors: [{ location: "quota", message: "the quota reached", value: "rate" }] }));
  };
}

function ok(body: unknown) {
  return (_req: IncomingMessage, res: ServerResponse) => {
    res.writeHead(200, { "Content-Type": "application/json" });
    res.end(JSON.stringify(body));
  };
}

test("retries: 503 without Retry-After backs off exponentially; the body is sent again", async () => {
  const s = await fakeServer([problem(503, "redis"), problem(503, "redis"), ok({ id: "j", status: "queued", stdout: "", stderr: "" })]);
  try {
    const retries: RetryInfo[] = [];
    const c = new Client({ url: s.url, apiKey: "sqk_k", retryBaseMs: 50, onRetry: (r) => retries.push(r) });
    // GET: safe to repeat.
    const v = await c.get("j");
    assert.equal(v.id, "j");
    assert.deepEqual(retries.map((r) => r.attempt), [1, 2]);
    assert.ok(retries[0]!.delayMs >= 25 && retries[0]!.delayMs <= 50, `first backoff ${retries[0]!.delayMs}`);
    assert.ok(retries[1]!.delayMs >= 50 && retries[1]!.delayMs <= 100, `second backoff ${retries[1]!.delayMs}`);
    assert.ok(s.got[2]!.at - s.got[1]!.at >= 45, "waited before the second retry");
    assert.ok(s.got.every((g) => g.auth === "Bearer sqk_k"));
  } finally {
    await s.close();
  }
});

test("retries: 429 honours Retry-After and resends the body; a POST's bare 503 is not retried", async () => {
  const s = await fakeServer([problem(429, "slow down", { "Retry-After": "1" }), ok({ id: "a", status: "queued", stdout: "", stderr: "" }), problem(503, "cannot enqueue")]);
  try {
    const c = new Client({ url: s.url, retryBaseMs: 1 });
    const t0 = Date.now();
    await c.submit({ lang: "python", code: "print(1)" });
    assert.ok(Date.now() - t0 >= 950, "waited Retry-After's second");
    assert.equal(s.got.length, 2);
    assert.deepEqual(JSON.parse(s.got[1]!.body), { lang: "python", code: "print(1)" });
    await assert.rejects(c.submit({ lang: "python", code: "x" }), (e: unknown) => {
      assert.ok(e instanceof ApiError);
      assert.equal(e.status, 503);
      assert.equal(e.detail, "cannot enqueue");
      return true;
    });
    assert.equal(s.got.length, 3, "a POST's 503 without Retry-After is not repeated");
  } finally {
    await s.close();
  }
});

test("retries: gives up after maxRetries with the last problem", async () => {
  const s = await fakeServer([problem(429, "rate limit", { "Retry-After": "0" })]);
  try {
    const c = new Client({ url: s.url, maxRetries: 2 });
    await assert.rejects(c.languages(), (e: unknown) => {
      assert.ok(e instanceof ApiError);
      assert.equal(e.status, 429);
      assert.equal(e.quota, "rate");
      assert.equal(e.retryAfterMs, 0);
      assert.equal(e.problem.detail, "rate limit");
      return true;
    });
    assert.equal(s.got.length, 3, "the request and two retries");
  } finally {
    await s.close();
  }
});
