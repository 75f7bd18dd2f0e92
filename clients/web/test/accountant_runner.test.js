// The accountant's runner (src/accountant_runner.js): in Node it computes in-process, the
// accountant's own doubles; over a worker (a stand-in here, Chromium in
// tests/test_web_worker.py) it runs one request at a time, cancels by terminating the
// worker, and fails a request whose worker fails. Then the guarantee check's progress
// and cancel, through verifyParameters and the Session.

import assert from "node:assert/strict";
import { test } from "node:test";

import { readView } from "../src/answers.js";
import { AccountantError, userDelta } from "../src/accountant/index.js";
import { answer } from "../src/accountant/service.js";
import {
  AccountantRunner, AccountantUnavailableError, defaultRunner,
} from "../src/accountant_runner.js";
import { VerificationError } from "../src/errors.js";
import { makePolicy } from "../src/policy.js";
import { Session } from "../src/session.js";
import { verifyParameters } from "../src/verify.js";
import { FakeShuffler } from "../harness/fake-shuffler.js";
import { KEY_CONFIG, VECTORS, recordedUserDelta } from "../harness/vectors.js";

/** A light document (tens of ms for the real accountant) and its level calls. */
const LIGHT = VECTORS.parameters.find((v) => v.description.startsWith("independent blanket, s = 1"));
const P = LIGHT.parameters;
const ARGS = LIGHT.level_verdicts.map((v) => [v.level, v.lambda, P.set_size, P.honest_users, P.m,
  P.privacy_domain_size, { mode: P.blanket_mode, delta: P.delta }]);
const REFUSED = [31, 0.5, 2, 1000, 1.0, 20, {}];

/** A Worker stand-in: it records requests and answers one when the test says so. */
class FakeWorker {
  /** @type {FakeWorker[]} every worker started, in order */
  static started = [];

  constructor() {
    this.listeners = new Map();
    this.posted = [];
    this.terminated = false;
    FakeWorker.started.push(this);
  }

  addEventListener(type, listener) {
    this.listeners.set(type, [...(this.listeners.get(type) ?? []), listener]);
  }

  postMessage(request) {
    this.posted.push(request);
  }

  terminate() {
    this.terminated = true;
  }

  emit(type, event) {
    for (const listener of this.listeners.get(type) ?? []) listener(event);
  }

  /** Answer the last request with the accountant, as accountant/worker.js does. */
  answerLast() {
    this.emit("message", { data: answer(this.posted.at(-1)) });
  }
}

function workerRunner() {
  FakeWorker.started = [];
  return new AccountantRunner({ createWorker: () => new FakeWorker() });
}

/** Let pending promise reactions run. */
const settled = () => new Promise((resolve) => setImmediate(resolve));

test("in Node the runner computes in-process: the accountant's own doubles and errors", async () => {
  const runner = defaultRunner();
  assert.equal(defaultRunner(), runner); // one per process
  for (const args of ARGS) assert.ok(Object.is(await runner.userDelta(args), userDelta(...args)));
  await assert.rejects(runner.userDelta(REFUSED), (error) => error instanceof AccountantError
    && /privacy level must be in \[0, 30\]/.test(error.message));
});

test("in-process: an aborted signal rejects with its reason and computes nothing", async () => {
  const runner = new AccountantRunner();
  const controller = new AbortController();
  controller.abort();
  await assert.rejects(runner.userDelta(ARGS[0], { signal: controller.signal }),
    (error) => error.name === "AbortError");
  const reason = new Error("the user left");
  const pending = runner.userDelta(ARGS[0], { signal: AbortSignal.abort(reason) });
  await assert.rejects(pending, (error) => error === reason);
  // a request cancelled before the accountant got to it is skipped, the next one answered
  const later = new AbortController();
  const skipped = runner.userDelta(ARGS[1], { signal: later.signal });
  later.abort();
  await assert.rejects(skipped, (error) => error.name === "AbortError");
  assert.ok(Object.is(await runner.userDelta(ARGS[2]), userDelta(...ARGS[2])));
});

test("the service answers a value or the accountant's error, never throws", () => {
  assert.deepEqual(answer({ id: 7, args: ARGS[0] }), { id: 7, value: userDelta(...ARGS[0]) });
  const refused = answer({ id: 8, args: REFUSED });
  assert.equal(refused.id, 8);
  assert.equal(refused.error.name, "AccountantError");
  assert.match(refused.error.message, /privacy level/);
  assert.equal(answer({ id: 9 }).error.name, "TypeError");
  assert.equal(answer(null).error.name, "TypeError");
});

test("over a worker: one request at a time, in order, the worker started once", async () => {
  const runner = workerRunner();
  const first = runner.userDelta(ARGS[0]);
  const second = runner.userDelta(ARGS[1]);
  const [worker] = FakeWorker.started;
  assert.equal(worker.posted.length, 1);
  worker.answerLast();
  assert.ok(Object.is(await first, userDelta(...ARGS[0])));
  assert.equal(worker.posted.length, 2);
  assert.deepEqual(worker.posted[1].args, ARGS[1]);
  worker.answerLast();
  assert.ok(Object.is(await second, userDelta(...ARGS[1])));
  const refused = runner.userDelta(REFUSED);
  worker.answerLast();
  await assert.rejects(refused, (error) => error instanceof AccountantError && /privacy level/.test(error.message));
  assert.equal(FakeWorker.started.length, 1);
  assert.equal(worker.terminated, false);
});

test("over a worker: cancelling the running request terminates the worker", async () => {
  const runner = workerRunner();
  const controller = new AbortController();
  const running = runner.userDelta(ARGS[0], { signal: controller.signal });
  const queued = runner.userDelta(ARGS[1]);
  const [first] = FakeWorker.started;
  controller.abort();
  await assert.rejects(running, (error) => error.name === "AbortError");
  assert.equal(first.terminated, true);
  // the queued request goes to a new worker; a late reply of the old one is ignored
  first.answerLast();
  const second = FakeWorker.started[1];
  assert.deepEqual(second.posted.map((r) => r.args), [ARGS[1]]);
  second.answerLast();
  assert.ok(Object.is(await queued, userDelta(...ARGS[1])));
});

test("over a worker: a cancelled queued request is dropped, the running one goes on", async () => {
  const runner = workerRunner();
  const controller = new AbortController();
  const running = runner.userDelta(ARGS[0]);
  const queued = runner.userDelta(ARGS[1], { signal: controller.signal });
  const after = runner.userDelta(ARGS[2]);
  controller.abort();
  await assert.rejects(queued, (error) => error.name === "AbortError");
  const [worker] = FakeWorker.started;
  assert.equal(worker.terminated, false);
  worker.answerLast();
  await running;
  assert.deepEqual(worker.posted.map((r) => r.args), [ARGS[0], ARGS[2]]);
  worker.answerLast();
  assert.ok(Object.is(await after, userDelta(...ARGS[2])));
});

test("over a worker: a worker that fails fails its request, and the next starts anew", async () => {
  for (const [type, text] of [["error", /did not load or it stopped\): boom/],
    ["messageerror", /cannot be read/]]) {
    const runner = workerRunner();
    const failing = runner.userDelta(ARGS[0]);
    const [broken] = FakeWorker.started;
    broken.emit(type, { message: "boom" });
    await assert.rejects(failing, (error) => error instanceof AccountantUnavailableError
      && text.test(error.message));
    assert.equal(broken.terminated, true);
    const next = runner.userDelta(ARGS[1]);
    FakeWorker.started[1].answerLast();
    assert.ok(Object.is(await next, userDelta(...ARGS[1])));
  }
  const unstartable = new AccountantRunner({
    createWorker: () => {
      throw new DOMException("refused by the page's policy", "SecurityError");
    },
  });
  await assert.rejects(unstartable.userDelta(ARGS[0]), (error) => error instanceof AccountantUnavailableError
    && /could not start: refused/.test(error.message));
});

test("close() terminates the worker and refuses what waits", async () => {
  const runner = workerRunner();
  const running = runner.userDelta(ARGS[0]);
  const queued = runner.userDelta(ARGS[1]);
  runner.close();
  for (const pending of [running, queued]) {
    await assert.rejects(pending, (error) => error instanceof AccountantUnavailableError);
  }
  assert.equal(FakeWorker.started[0].terminated, true);
  const next = runner.userDelta(ARGS[2]);
  FakeWorker.started[1].answerLast();
  assert.ok(Object.is(await next, userDelta(...ARGS[2])));
});

// -- the guarantee check ------------------------------------------------------------------

function round2(vector, options = {}) {
  const view = readView({
    id: vector.config.id, phase: "round2", config: vector.config, config_hash: vector.config_hash,
    key_id: KEY_CONFIG.key_id, hpke_config: KEY_CONFIG, parameters: vector.parameters,
    parameters_hash: vector.parameters_hash,
  });
  return verifyParameters(view, { levelIndex: 0, keyId: KEY_CONFIG.key_id,
    configHash: view.config_hash, policy: makePolicy(), ...options });
}

test("the check with the runner: its progress, the vectors' verdicts, remembered", async () => {
  const tampered = VECTORS.parameters.find((v) => v.description.startsWith("tampered (independent blanket, s = 1")
    && v.client_checks[0] === "lambdas");
  const steps = [];
  await round2(LIGHT, { onProgress: (step) => steps.push(step) });
  assert.deepEqual(steps, [0, 1, 2, 3].map((checked) => ({ checked, total: 3 })));
  steps.length = 0;
  await round2(LIGHT, { onProgress: (step) => steps.push(step) }); // the verdict is remembered
  assert.deepEqual(steps, [{ checked: 3, total: 3 }]);
  await assert.rejects(round2(tampered), (error) => error instanceof VerificationError
    && error.check === "lambdas");
});

test("a cancelled check rejects with the signal's reason, not a refusal, and is not remembered", async () => {
  const controller = new AbortController();
  const steps = [];
  const vector = VECTORS.parameters.find((v) => v.description.startsWith("slots blanket, s = 1, d = 17, m = 1 "));
  const cancelled = round2(vector, { signal: controller.signal, onProgress: (step) => {
    steps.push(step.checked);
    if (step.checked === 1) controller.abort();
  } });
  await assert.rejects(cancelled, (error) => error.name === "AbortError"
    && !(error instanceof VerificationError));
  assert.deepEqual(steps, [0, 1]);
  steps.length = 0;
  await round2(vector, { onProgress: (step) => steps.push(step.checked) });
  assert.deepEqual(steps, [0, 1, 2, 3]);
});

test("an unavailable accountant refuses the parameters with check `accountant`", async () => {
  const unavailable = () => {
    throw new AccountantUnavailableError("the accountant's worker failed");
  };
  await assert.rejects(round2(LIGHT, { userDelta: unavailable }), (error) => error instanceof VerificationError
    && error.check === "accountant" && /not available.*worker failed/.test(error.message));
});

test("the Session hands its signal and onProgress to the check, and awaits its verdict", async () => {
  const shuffler = await FakeShuffler.create(VECTORS.parameters[0]);
  const controller = new AbortController();
  const steps = [];
  let answered = false;
  const { userDelta: recorded } = recordedUserDelta(shuffler.vector);
  const session = new Session({
    shufflerUrl: "https://shuffler.example", campaignId: shuffler.id, serverKey: shuffler.serverKey,
    fetch: shuffler.fetch, signal: controller.signal,
    userDelta: async (...args) => {
      await settled();
      answered = true;
      return recorded(...args);
    },
    onProgress: (step) => {
      steps.push(step.checked);
      if (step.checked === 2) controller.abort();
    },
  });
  await session.campaign();
  await session.enroll("invite-1");
  await session.submitLevel(0);
  shuffler.release1();
  await assert.rejects(session.fetchParameters(), (error) => error.name === "AbortError");
  assert.ok(answered);
  assert.deepEqual(steps, [0, 1, 2]);
  assert.equal(session.parameters, null);
  assert.equal(shuffler.submissions[2].size, 0);
});
