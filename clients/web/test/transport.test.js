// The transport's retry budget, with an injected fetch and clock: 429 and 503 and lost
// answers are retried, honouring Retry-After (seconds or an HTTP date, capped), for a
// time budget however many tries that takes; while the device is offline it waits for
// the `online` event instead; anything else fails at once as a RefusedError with its
// problem document; submissions count an already-submitted answer after an ambiguous
// failure as done; requests carry nothing the shuffler does not need.

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  HttpError, NetworkError, OfflineError, ProtocolError, RefusedError, ServiceUnreachableError,
} from "../src/errors.js";
import { DEFAULT_RETRY, Transport, retryAfterMs } from "../src/transport.js";

const PROBLEM = "application/problem+json";

function json(status, body, headers = {}) {
  return new Response(JSON.stringify(body), {
    status, headers: { "content-type": status >= 400 ? PROBLEM : "application/json", ...headers },
  });
}

function problem(status, name, detail, headers = {}) {
  return json(status, { type: `urn:segshuffle:error:${name}`, title: name, status, detail }, headers);
}

/**
 * A fake clock and a fetch that plays `answers` in order, recording every call; the
 * device is online unless `connectivity` says otherwise.
 */
function harness(answers, retry = {}, connectivity = undefined) {
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
    retry: { initialDelayMs: 100, maxDelayMs: 1000, maxRetryAfterMs: 10_000,
      budgetMs: 60_000, ...retry },
    now: () => clock.now,
    sleep: async (ms) => {
      clock.sleeps.push(ms);
      clock.now += ms;
    },
    random: () => 0.5,
    connectivity,
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

test("retries stop at the time budget, not after a count of tries", async () => {
  const { transport, calls, clock } = harness(Array.from({ length: 99 },
    () => problem(503, "unavailable", "not ready")), { budgetMs: 5000 });
  const error = await transport.request("/x", { what: "campaign" }).catch((e) => e);
  assert.ok(error instanceof ServiceUnreachableError, String(error));
  assert.ok(!(error instanceof OfflineError));
  assert.ok(error.lastError instanceof HttpError);
  assert.equal(error.lastError.problem, "unavailable");
  // backoff uniform in [d/2, d] with d = 100 * 2^k, capped at 1000 (random 0.5 gives 3d/4);
  // the last wait ends at the budget, and one last try follows it
  assert.deepEqual(clock.sleeps, [75, 150, 300, 600, 750, 750, 750, 750, 750, 125]);
  assert.equal(calls.length, 11);
  assert.equal(error.attempts, 11);
  assert.equal(error.waitedMs, 5000);
  assert.match(error.message, /^campaign: no usable answer from the shuffler in 5000 ms \(11 tries\)/);
});

test("the default budget is two minutes of tries, however many", async () => {
  const { transport, calls, clock } = harness(Array.from({ length: 999 },
    () => new TypeError("fetch failed")), { budgetMs: undefined, initialDelayMs: 200, maxDelayMs: 5000 });
  const error = await transport.request("/x").catch((e) => e);
  assert.ok(error instanceof ServiceUnreachableError, String(error));
  assert.equal(DEFAULT_RETRY.budgetMs, 120_000);
  assert.equal(error.waitedMs, 120_000);
  assert.ok(calls.length > 20, String(calls.length));
  assert.throws(() => new Transport("https://s.example", { retry: { attempts: 6 } }), RangeError);
});

test("no wait is begun that would run past the total budget", async () => {
  const { transport, calls, clock } = harness([
    problem(429, "rate-limited", "", { "retry-after": "4" }),
    problem(429, "rate-limited", "", { "retry-after": "4" }),
    problem(429, "rate-limited", "", { "retry-after": "4" }),
  ], { budgetMs: 9000 });
  const error = await transport.request("/x").catch((e) => e);
  assert.ok(error instanceof ServiceUnreachableError);
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
  const { transport: down } = harness([new TypeError("fetch failed")], { budgetMs: 0 });
  const error = await down.request("/x").catch((e) => e);
  assert.ok(error instanceof ServiceUnreachableError && error.lastError instanceof NetworkError);
});

test("a 4xx problem document fails at once as a RefusedError carrying it", async () => {
  const { transport, calls } = harness([
    problem(403, "invitation-used", "the invitation has already been used"),
  ]);
  const error = await transport.request("/v1/campaigns/c/enrollments",
    { method: "POST", json: {}, what: "enrollment" }).catch((e) => e);
  assert.ok(error instanceof RefusedError && error instanceof HttpError, String(error));
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

/**
 * A device whose network goes off and on under the test's control, on the harness clock:
 * untilOnline resolves when `comeBackAt` is reached or the wait ends.
 */
function network(clock, { offline = true } = {}) {
  const state = { offline, comeBackAt: Infinity, waits: [] };
  state.connectivity = {
    online: () => !state.offline,
    untilOnline: async (ms) => {
      state.waits.push(ms);
      const until = Math.min(clock.now + ms, state.comeBackAt);
      clock.now = until;
      if (until === state.comeBackAt) state.offline = false;
    },
  };
  return state;
}

test("offline, a request waits for the online event and tries again at once", async () => {
  const answers = [new TypeError("Failed to fetch"), new TypeError("Failed to fetch"), json(200, { ok: 1 })];
  const { transport, calls, clock } = harness(answers, { budgetMs: 120_000 });
  const net = network(clock);
  transport.connectivity = net.connectivity;
  net.comeBackAt = clock.now + 40_000;
  const started = clock.now;
  const answer = await transport.request("/x");
  assert.deepEqual(answer.body, { ok: 1 });
  // one try, one wait for the network (no backoff steps), then a try the moment it is back
  assert.equal(net.waits.length, 1);
  // the try right after coming back failed: backoff anew, from the first step
  assert.deepEqual(clock.sleeps, [75]);
  assert.equal(clock.now - started, 40_000 + 75);
  assert.equal(calls.length, 3);
});

test("offline until the budget ends is an OfflineError, not a generic failure", async () => {
  const { transport, calls, clock } = harness(Array.from({ length: 9 }, () => new TypeError("Failed to fetch")),
    { budgetMs: 30_000 });
  const net = network(clock);
  transport.connectivity = net.connectivity;
  const error = await transport.request("/x", { what: "campaign" }).catch((e) => e);
  assert.ok(error instanceof OfflineError, String(error));
  assert.ok(error instanceof ServiceUnreachableError);
  assert.equal(error.waitedMs, 30_000);
  assert.equal(calls.length, 1); // no tries while offline
  assert.deepEqual(clock.sleeps, []);
  assert.ok(error.lastError instanceof NetworkError);
  assert.match(error.message, /^campaign: the device is offline/);
});

test("a submission that never left while offline is not stored; one that may have is unknown", async () => {
  const refused = Object.assign(new TypeError("fetch failed"), { cause: { code: "ECONNREFUSED" } });
  const { transport, clock } = harness([refused, refused], { budgetMs: 10_000 });
  transport.connectivity = network(clock).connectivity;
  const error = await transport.request("/s", { method: "POST", json: {}, submission: true }).catch((e) => e);
  assert.ok(error instanceof OfflineError, String(error));
  assert.equal(error.stored, false);
  const { transport: lost, clock: clock2 } = harness([new TypeError("fetch failed")], { budgetMs: 10_000 });
  lost.connectivity = network(clock2).connectivity;
  const unknown = await lost.request("/s", { method: "POST", json: {}, submission: true }).catch((e) => e);
  assert.equal(unknown.name, "SubmissionUnknownError");
  assert.equal(unknown.stored, null);
});
