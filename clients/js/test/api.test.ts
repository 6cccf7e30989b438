// Drives the client against a real API and worker (e2e/jsclient_test.go
// starts them and runs `npm test`):
//
//   SANDQ_API_URL=http://127.0.0.1:8080 SANDQ_API_KEY=sqk_... \
//   SANDQ_API_KEY_RATE1=sqk_... SANDQ_WEBHOOK_VECTOR=... npm test
//
// SANDQ_API_KEY_RATE1 is a key of another tenant made with `--rate 1`;
// the API must allow webhooks to 127.0.0.1 (--webhook-allow-hosts
// 127.0.0.1) and the worker take sessions. Every variable is required: a
// missing one fails its test rather than skipping it.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { test } from "node:test";

import {
  ApiError,
  Client,
  SessionEnded,
  WaitTimeout,
  outputBytes,
  verifyWebhook,
  type JobEvent,
  type JobView,
  type RetryInfo,
} from "@sandq/client";

function need(name: string): string {
  const v = process.env[name];
  assert.ok(v, `${name} is not set`);
  return v;
}

const url = () => need("SANDQ_API_URL");
const client = () => new Client({ url: url(), apiKey: need("SANDQ_API_KEY") });
const text = (b: Uint8Array) => new TextDecoder().decode(b);
const sha256 = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");

test("run: a job waited for, typed result", async () => {
  const r = await client().run({ lang: "python", code: "print(6 * 7)", tags: { k: "v" } });
  assert.equal(r.status, "succeeded");
  assert.equal(r.stdout, "42\n");
  assert.equal(r.exit_code ?? 0, 0);
  assert.deepEqual(r.tags, { k: "v" });
  assert.ok(r.usage && (r.usage.wall_ms ?? 0) >= 0);
  assert.equal((await client().get(r.id)).status, "succeeded", "read again");
});

test("errors: the problem of an invalid job, of an unknown job", async () => {
  const c = client();
  await assert.rejects(c.submit({ lang: "python", code: "x", limits: { memory_mb: 1 << 20 } }), (e: unknown) => {
    assert.ok(e instanceof ApiError, String(e));
    assert.equal(e.status, 422);
    assert.equal(e.problem.status, 422);
    assert.equal(e.errors[0]?.location, "body.limits.memory_mb");
    assert.match(e.message, /body\.limits\.memory_mb/);
    return true;
  });
  await assert.rejects(c.get("no-such-job"), (e: unknown) => e instanceof ApiError && e.status === 404);
});

test("events: live output of a streaming job, exact bytes, resumed with Last-Event-ID", async () => {
  const c = client();
  const job = await c.submit({
    lang: "python",
    stream: true,
    code:
      "import sys, time\nfor i in range(3):\n    print('line', i, flush=True)\n    time.sleep(0.3)\n" +
      "sys.stdout.buffer.write(bytes([0, 255, 1]))\n",
  });
  const events: JobEvent[] = [];
  for await (const ev of c.events(job.id)) events.push(ev);
  const kinds = events.map((e) => e.event);
  assert.equal(kinds[0], "status", kinds.join(","));
  assert.equal(kinds.at(-1), "result");
  const firstOutput = events.findIndex((e) => e.event === "output");
  const running = events.findIndex((e) => e.event === "status" && e.data.status === "running");
  assert.ok(running >= 0 && running < firstOutput, `a running status before the output: ${kinds.join(",")}`);
  const outputs = events.filter((e): e is Extract<JobEvent, { event: "output" }> => e.event === "output" && e.data.step === "run");
  assert.ok(outputs.length >= 2, "output came in chunks");
  assert.ok(outputs.every((e) => e.id && !e.data.from_result), "live chunks carry stream ids");
  const bytes = (evs: typeof outputs) =>
    Buffer.concat(evs.filter((e) => e.data.stream === "stdout").map((e) => outputBytes(e.data.data, e.data.encoding)));
  const want = Buffer.concat([Buffer.from("line 0\nline 1\nline 2\n"), Buffer.from([0, 255, 1])]);
  assert.deepEqual(bytes(outputs), want);
  const result = events.at(-1)!.data as JobView;
  assert.equal(result.status, "succeeded");
  assert.deepEqual(Buffer.from(outputBytes(result.stdout, result.stdout_encoding)), want);

  // Resume after the first chunk: the rest, nothing repeated.
  const rest: typeof outputs = [];
  for await (const ev of c.events(job.id, { lastEventId: outputs[0]!.id! })) {
    if (ev.event === "output" && ev.data.step === "run") rest.push(ev);
  }
  assert.deepEqual(Buffer.concat([outputBytes(outputs[0]!.data.data, outputs[0]!.data.encoding), bytes(rest)]), want);

  const out = await c.output(job.id);
  assert.deepEqual(Buffer.from(out.stdout), want);
  assert.equal(out.result.status, "succeeded");
});

test("cancel: a running job ends canceled; a wait runs out first; cancel again is 409", async () => {
  const c = client();
  const job = await c.submit({ lang: "python", stream: true, code: "import time\nprint('started', flush=True)\ntime.sleep(120)\n" });
  for await (const ev of c.events(job.id)) {
    if (ev.event === "output" && ev.data.data.includes("started")) break;
    assert.notEqual(ev.event, "result", "the job ended before it was canceled");
  }
  await assert.rejects(c.wait(job.id, { timeoutMs: 1000 }), (e: unknown) => e instanceof WaitTimeout && e.status === "running");
  const t0 = Date.now();
  await c.cancel(job.id);
  let r = await c.wait(job.id, { timeoutMs: 60_000 });
  assert.equal(r.status, "canceled");
  assert.ok(Date.now() - t0 < 60_000);
  // The wait may report the cancel before the worker has stored its own
  // result, the program killed and its output so far kept; it follows.
  for (let i = 0; r.reason !== "canceled while running"; i++) {
    assert.ok(i < 300, `the worker's result: ${JSON.stringify(r)}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
    r = await c.get(job.id);
  }
  assert.equal(r.status, "canceled");
  assert.equal(r.stdout, "started\n", "the output so far is kept");
  await assert.rejects(c.cancel(job.id), (e: unknown) => e instanceof ApiError && e.status === 409);
});

test("artifacts: output files listed and downloaded byte-exact", async () => {
  const c = client();
  const blob = new Uint8Array(70_000).map((_, i) => (i * 7) % 256);
  const r = await c.run({
    lang: "python",
    code:
      "import os\nos.makedirs('out', exist_ok=True)\nopen('out/data.csv', 'w').write('a,b\\n1,2\\n')\n" +
      "open('blob.bin', 'wb').write(bytes((i * 7) % 256 for i in range(70000)))\n",
    output_files: ["out/*.csv", "blob.bin"],
  });
  assert.equal(r.status, "succeeded", r.stderr);
  assert.equal(r.artifacts?.length, 2, JSON.stringify(r.artifacts));
  const list = await c.artifacts(r.id);
  assert.deepEqual(list.map((a) => a.name).sort(), ["blob.bin", "out/data.csv"]);
  const csv = list.find((a) => a.name === "out/data.csv")!;
  assert.equal(csv.kind, "file");
  assert.equal(csv.size, 8);
  assert.equal(text(await c.download(r.id, "out/data.csv")), "a,b\n1,2\n");
  const got = await c.download(r.id, "blob.bin");
  assert.equal(sha256(got), sha256(blob));
  await assert.rejects(c.download(r.id, "nope.txt"), (e: unknown) => e instanceof ApiError && e.status === 404);
});

test("batch: jobs enqueued at once, results as they finish, an invalid item's error", async () => {
  const c = client();
  const n = Number(process.env.SANDQ_BATCH_JOBS ?? "20");
  const jobs = Array.from({ length: n }, (_, i) => ({ lang: "python", code: `print(${i} * ${i})`, tags: { i: String(i) } }));
  const created = await c.batch([...jobs, { lang: "python", code: "x", limits: { memory_mb: 1 << 20 } }]);
  assert.equal(created.enqueued, n);
  const bad = created.items?.[n];
  assert.equal(bad?.error?.status, 422, JSON.stringify(bad));
  assert.ok(created.items?.slice(0, n).every((it) => it.id && !it.error));
  let ok = 0;
  const seen = new Set<string>();
  for await (const r of c.batchResults(created.id)) {
    seen.add(r.id);
    const i = Number(r.tags?.i);
    if (r.status === "succeeded" && r.stdout === `${i * i}\n`) ok++;
  }
  assert.equal(seen.size, n);
  assert.equal(ok, n);
  const progress = await c.batchProgress(created.id);
  assert.equal(progress.done, n);
  assert.equal(progress.counts.succeeded, n);
  console.log(`batch: ${n} jobs, ${ok} succeeded`);
});

test("judge: verdict, cases and score", async () => {
  const r = await client().judge(
    "python",
    "a, b = map(int, input().split())\nprint(a + b if a != 2 else 5)",
    [
      { stdin: "1 2\n", expected_stdout: "3\n" },
      { stdin: "2 2\n", expected_stdout: "4\n" },
      { stdin: "3 3\n", expected_stdout: "6\n" },
    ],
    { limits: { cpu_ms: 1000 }, stop_on_first_failure: true },
  );
  assert.equal(r.status, "failed");
  assert.equal(r.verdict, "wrong_answer");
  assert.deepEqual(r.cases?.map((x) => x.verdict), ["accepted", "wrong_answer", "skipped"]);
  assert.equal(r.cases?.[1]?.stdout, "5\n");
  assert.equal(r.cases?.[1]?.expected, "4\n");
  assert.equal(typeof r.score, "number");
});

test("session: state over two cells, a file up and down, closed", async () => {
  const c = client();
  const s = await c.openSession("python", { limits: { timeout_ms: 20_000 }, files: [{ path: "in/hello.txt", data: "hi" }] });
  let closed = false;
  try {
    assert.equal(s.info.state, "ready");
    const first = await s.exec("x = 6");
    assert.equal(first.status, "ok", JSON.stringify(first));
    const second = await s.exec("print(x * 7)\nprint(open('in/hello.txt').read())");
    assert.equal(second.status, "ok", JSON.stringify(second));
    assert.equal(second.stdout, "42\nhi\n", "state kept from the first cell");
    const err = await s.exec("1 / 0");
    assert.equal(err.status, "error");
    assert.equal(err.error?.name, "ZeroDivisionError");

    const data = new Uint8Array(100_000).map((_, i) => (i * 31) % 256);
    await s.upload("data/blob.bin", data);
    const h = await s.exec("import hashlib\nprint(hashlib.sha256(open('data/blob.bin', 'rb').read()).hexdigest())");
    assert.equal(h.stdout, sha256(data) + "\n");
    assert.equal(sha256(await s.download("data/blob.bin")), sha256(data));
    const files = await s.files();
    assert.equal(files.find((f) => f.path === "data/blob.bin")?.size, data.length, JSON.stringify(files));
    await assert.rejects(s.upload("../escape.txt", "x"), (e: unknown) => e instanceof ApiError && e.status === 422);
    assert.ok((await s.refresh()).execution_count >= 4);
    assert.ok((await c.sessions()).some((x) => x.id === s.id));

    const info = await s.close();
    closed = true;
    assert.equal(info.state, "closed");
    assert.equal((await c.session(s.id)).info.state, "closed");
    await assert.rejects(s.exec("print(x)"), (e: unknown) => {
      assert.ok(e instanceof SessionEnded, String(e));
      assert.equal(e.status, 410);
      assert.equal(e.state, "closed");
      return true;
    });
  } finally {
    if (!closed) await s.close().catch(() => undefined);
  }
});

test("retries: a key with a rate of 1/s gets 429s, retried after Retry-After", async () => {
  const key = need("SANDQ_API_KEY_RATE1");
  const retries: RetryInfo[] = [];
  const c = new Client({ url: url(), apiKey: key, maxRetries: 8, onRetry: (r) => retries.push(r) });
  const t0 = Date.now();
  const answers = await Promise.all([c.languages(), c.languages(), c.languages()]);
  assert.ok(answers.every((langs) => langs.some((l) => l.name === "python")));
  assert.ok(retries.length >= 2, `3 requests at a rate of 1/s: ${retries.length} retries`);
  for (const r of retries) {
    assert.equal(r.error.status, 429);
    assert.equal(r.error.quota, "rate");
    assert.equal(r.delayMs, 1000, "Retry-After: 1");
  }
  assert.ok(Date.now() - t0 >= 1000, "the retries waited");

  // Without retries the 429 comes back as an ApiError with its problem.
  const bare = new Client({ url: url(), apiKey: key, maxRetries: 0 });
  const settled = await Promise.allSettled(Array.from({ length: 5 }, () => bare.languages()));
  const refused = settled.filter((s): s is PromiseRejectedResult => s.status === "rejected").map((s) => s.reason as unknown);
  assert.ok(refused.length >= 3, `5 requests at once, ${refused.length} refused`);
  for (const e of refused) {
    assert.ok(e instanceof ApiError, String(e));
    assert.equal(e.status, 429);
    assert.equal(e.quota, "rate");
    assert.equal(e.retryAfterMs, 1000);
    assert.match(e.detail, /rate limit of 1 requests per second/);
  }
});

test("webhook: a delivery to a local server verifies with the key's secret", async () => {
  const c = client();
  const deliveries: { signature: string; body: Buffer; event: string }[] = [];
  let got: () => void = () => undefined;
  const arrived = new Promise<void>((resolve) => (got = resolve));
  const server = createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on("data", (b: Buffer) => parts.push(b));
    req.on("end", () => {
      deliveries.push({ signature: String(req.headers["sandq-signature"] ?? ""), body: Buffer.concat(parts), event: String(req.headers["sandq-event"]) });
      res.writeHead(204).end();
      got();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  try {
    const port = (server.address() as AddressInfo).port;
    const job = await c.submit({ lang: "python", code: "print('hooked')", callback_url: `http://127.0.0.1:${port}/hook` });
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([arrived, new Promise((_, reject) => (timer = setTimeout(() => reject(new Error("no delivery in 60 s")), 60_000)))]);
    clearTimeout(timer);
    const d = deliveries[0]!;
    assert.equal(d.event, "job.finished");
    const view = JSON.parse(d.body.toString()) as JobView;
    assert.equal(view.id, job.id);
    assert.equal(view.stdout, "hooked\n");
    const secret = await c.webhookSecret();
    assert.equal(await verifyWebhook(secret, d.signature, d.body), true, d.signature);
    assert.equal(await verifyWebhook(secret, d.signature, Buffer.concat([d.body, Buffer.from(" ")])), false, "a changed body");
    assert.equal(await verifyWebhook(secret + "x", d.signature, d.body), false, "another secret");
    // The job's view records the delivery.
    for (let i = 0; ; i++) {
      const v = await c.get(job.id);
      if (v.webhook?.state === "delivered") {
        assert.equal(v.webhook.last_status_code, 204);
        break;
      }
      assert.ok(i < 50, `webhook ${JSON.stringify(v.webhook)}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  } finally {
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
});
