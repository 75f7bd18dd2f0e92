// The transport's retry budget, with an injected fetch and clock: 429 and 503 and lost
// answers are retried, honouring Retry-After (seconds or an HTTP date, capped), within
// the attempts and the total budget; anything else fails at once with its problem
// document; submissions count an already-submitted answer after an ambiguous failure as
// done; requests carry nothing the shuffler does not need.

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  HttpError, NetworkError, ProtocolError, RetryBudgetExceeded,
} from "../src/errors.js";
import { Transport, retryAfterMs } from "../src/transport.js";

const PROBLEM = "application/problem+json";

function json(status, body, headers = {}) {
  return new Response(JSON.stringify(body), {
    status, headers: { "content-type": status >= 400 ? PROBLEM : "application/json", ...headers },
  });
}

function problem(status, name, detail, headers = {}) {
  return json(status, { type: `urn:segshuffle:error:${name}`, title: name, status, detail }, headers);
}

/** A fake clock and a fetch that plays `answers` in order, recording every call. */
function harness(answers, retry = {}) {
  const clock = { now: 1_700_000_000_000, sleeps: [] };
  const calls = [];
  const transport = new Transport("https://shuffler.example/", {
    fetch: async (url, init) => {
      calls.push({ url, init });
      const next = answers.shift();
      if (next === undefined) throw new Error("no more answers");
      if (next instanceof Error) throw next;
      return typeof next === "function" ? next(init) : next;
    },
    retry: { attempts: 5, initialDelayMs: 100, maxDelayMs: 1000, maxRetryAfterMs: 10_000,
      budgetMs: 60_000, ...retry },
    now: () => clock.now,
    sleep: async (ms) => {
      clock.sleeps.push(ms);
      clock.now += ms;
    },
    random: () => 0.5,
  });
  return { transport, calls, clock };
}

test("a rate limit is waited out for its Retry-After seconds", async () => {
  const { transport, calls, clock } = harness([
    problem(429, "rate-limited", "slow down", { "retry-after": "3" }),
    json(201, { campaign_id: "c", token: "t" }),
  ]);
  const answer = await transport.request("/v1/campaigns/c/enrollments",
    { method: "POST", json: { token: "t" } });
  assert.deepEqual(answer.body, { campaign_id: "c", token: "t" });
  assert.equal(calls.length, 2);
  assert.deepEqual(clock.sleeps, [3000]); // longer than the backoff of 75 ms
  assert.equal(calls[0].url, "https://shuffler.example/v1/campaigns/c/enrollments");
});

test("Retry-After as an HTTP date, and every wait capped", async () => {
  const now = 1_700_000_000_000;
  assert.equal(retryAfterMs(new Date(now + 5000).toUTCString(), now, 60_000), 5000);
  assert.equal(retryAfterMs(new Date(now - 5000).toUTCString(), now, 60_000), 0);
  assert.equal(retryAfterMs("86400", now, 60_000), 60_000);
  assert.equal(retryAfterMs("-1", now, 60_000), null);
  assert.equal(retryAfterMs("1.5", now, 60_000), null);
  assert.equal(retryAfterMs(null, now, 60_000), null);
  const { transport, clock } = harness([
    problem(503, "unavailable", "starting", { "retry-after": new Date(now + 4000).toUTCString() }),
    problem(503, "unavailable", "starting", { "retry-after": "3600" }),
    json(200, { ok: true }),
  ]);
  await transport.request("/x");
  assert.deepEqual(clock.sleeps, [4000, 10_000]);
});

test("retries stop after the attempts, with the last failure", async () => {
  const { transport, calls, clock } = harness(Array.from({ length: 9 },
    () => problem(503, "unavailable", "not ready")));
  const error = await transport.request("/x", { what: "campaign" }).catch((e) => e);
  assert.ok(error instanceof RetryBudgetExceeded);
  assert.equal(calls.length, 5);
  assert.ok(error.lastError instanceof HttpError);
  assert.equal(error.lastError.problem, "unavailable");
  // backoff uniform in [d/2, d] with d = 100 * 2^k, capped at 1000 (random 0.5 gives 3d/4)
  assert.deepEqual(clock.sleeps, [75, 150, 300, 600]);
  assert.match(error.message, /^campaign: gave up after 5 tries/);
  assert.equal(error.attempts, 5);
  assert.equal(error.waitedMs, 1125);
});

test("no wait is begun that would run past the total budget", async () => {
  const { transport, calls, clock } = harness([
    problem(429, "rate-limited", "", { "retry-after": "4" }),
    problem(429, "rate-limited", "", { "retry-after": "4" }),
    problem(429, "rate-limited", "", { "retry-after": "4" }),
  ], { budgetMs: 9000 });
  const error = await transport.request("/x").catch((e) => e);
  assert.ok(error instanceof RetryBudgetExceeded);
  assert.equal(error.attempts, 3);
  assert.equal(calls.length, 3);
  assert.deepEqual(clock.sleeps, [4000, 4000]); // a third wait would end at 12 s
});

test("lost answers and timeouts are retried", async () => {
  const hanging = (init) => new Promise((_, reject) => {
    init.signal.addEventListener("abort", () => reject(init.signal.reason));
  });
  const { transport, calls } = harness([new TypeError("fetch failed"), hanging, json(200, [])],
    { timeoutMs: 20 });
  const answer = await transport.request("/x");
  assert.deepEqual(answer.body, []);
  assert.equal(calls.length, 3);
  const { transport: down } = harness([new TypeError("fetch failed")], { attempts: 1 });
  const error = await down.request("/x").catch((e) => e);
  assert.ok(error instanceof RetryBudgetExceeded && error.lastError instanceof NetworkError);
});

test("a 4xx problem document fails at once as an HttpError", async () => {
  const { transport, calls } = harness([
    problem(403, "invitation-used", "the invitation has already been used"),
  ]);
  const error = await transport.request("/v1/campaigns/c/enrollments",
    { method: "POST", json: {}, what: "enrollment" }).catch((e) => e);
  assert.ok(error instanceof HttpError);
  assert.equal(calls.length, 1);
  assert.equal(error.status, 403);
  assert.equal(error.problem, "invitation-used");
  assert.equal(error.detail, "the invitation has already been used");
  assert.equal(error.document.type, "urn:segshuffle:error:invitation-used");
  assert.equal(error.message, "enrollment: HTTP 403 invitation-used: the invitation has already been used");
  assert.equal(error.transient, false);
});

test("a 5xx is retried like a 429, problem document or not; a 4xx is final", async () => {
  const { transport, calls } = harness([
    problem(500, "internal", "boom"),
    new Response("<html>bad gateway</html>", { status: 502 }),
    new Response("{}", { status: 200, headers: { "content-type": "application/json" } }),
    problem(404, "unknown-campaign", "no such campaign"),
  ]);
  assert.equal((await transport.request("/x")).status, 200);
  assert.equal(calls.length, 3);
  const missing = await transport.request("/x").catch((e) => e);
  assert.ok(missing instanceof HttpError && missing.status === 404);
  assert.equal(calls.length, 4);
});

test("a submission retried after an ambiguous failure counts already-submitted as done", async () => {
  const { transport } = harness([
    new TypeError("fetch failed"), problem(409, "already-submitted", "this user already submitted"),
  ]);
  const answer = await transport.request("/s", { method: "POST", json: {}, submission: true, token: "t" });
  assert.equal(answer.alreadySubmitted, true);
  // Without an ambiguous failure first, already-submitted is an error.
  const { transport: plain } = harness([problem(409, "already-submitted", "")]);
  await assert.rejects(plain.request("/s", { method: "POST", json: {}, submission: true }),
    (e) => e instanceof HttpError && e.problem === "already-submitted");
  // Nor does a refused connection (the request never left) make it ambiguous.
  const refused = Object.assign(new TypeError("fetch failed"), { cause: { code: "ECONNREFUSED" } });
  const { transport: strict } = harness([refused, problem(409, "already-submitted", "")]);
  await assert.rejects(strict.request("/s", { method: "POST", json: {}, submission: true }), HttpError);
});

test("requests carry only what the shuffler needs", async () => {
  const { transport, calls } = harness([json(200, {}), json(201, {})]);
  await transport.request("/v", { fresh: true });
  await transport.request("/s", { method: "POST", json: { level: "x" }, token: "secret" });
  const [get, post] = calls.map((call) => call.init);
  assert.deepEqual(get.headers, {});
  assert.equal(get.body, undefined);
  assert.equal(get.cache, "no-cache");
  assert.deepEqual(post.headers, { "content-type": "application/json", authorization: "Bearer secret" });
  assert.equal(post.body, '{"level":"x"}');
  for (const init of [get, post]) {
    assert.equal(init.credentials, "omit");
    assert.equal(init.referrerPolicy, "no-referrer");
    assert.equal(init.redirect, "error");
  }
});

test("a malformed success is a ProtocolError, and the caller's abort is final", async () => {
  const { transport } = harness([new Response("not json", { status: 200 })]);
  await assert.rejects(transport.request("/x"), ProtocolError);
  const controller = new AbortController();
  const { transport: slow, calls } = harness([(init) => new Promise((_, reject) => {
    init.signal.addEventListener("abort", () => reject(init.signal.reason));
    controller.abort(new DOMException("stop", "AbortError"));
  })]);
  await assert.rejects(slow.request("/x", { signal: controller.signal }), { name: "AbortError" });
  assert.equal(calls.length, 1);
});
