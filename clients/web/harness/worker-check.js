// The guarantee check in a page, for tests/test_web_worker.py: a Session verifies a
// parameters vector of docs/test-vectors.json (an in-memory shuffler serves it) while a
// 50 ms interval timer measures how late the page's main thread lets it fire. The check
// runs the accountant in a Web Worker, so no tick should be late by much.

import { AccountantRunner, defaultRunner } from "../src/accountant_runner.js";
import { Session } from "../src/index.js";
import { FakeShuffler } from "./fake-shuffler.js";
import { VECTORS } from "./vectors.js";

const TICK_MS = 50;

/** A 50 ms interval timer; stop() tells the largest lateness of a tick (ms) and their count. */
function latenessMonitor() {
  let last = performance.now();
  let worstLateMs = 0;
  let ticks = 0;
  const tick = () => {
    const now = performance.now();
    worstLateMs = Math.max(worstLateMs, now - last - TICK_MS);
    last = now;
  };
  const timer = setInterval(() => {
    tick();
    ticks += 1;
  }, TICK_MS);
  return {
    stop() {
      clearInterval(timer);
      tick(); // a tick held back until now counts too
      return { worstLateMs, ticks };
    },
  };
}

/**
 * Check the parameters of vector `index` as a user at level 0 would (Session.
 * fetchParameters), with a cancel `abortAfterMs` after the check starts when given.
 * @param {number} index @param {{ abortAfterMs?: number | null }} [options]
 */
async function check(index, { abortAfterMs = null } = {}) {
  const shuffler = await FakeShuffler.create(VECTORS.parameters[index]);
  const controller = new AbortController();
  const progress = [];
  const progressAtMs = [];
  let abortedAt = null;
  const session = new Session({
    shufflerUrl: "https://shuffler.example", campaignId: shuffler.id,
    serverKey: shuffler.serverKey, fetch: shuffler.fetch, signal: controller.signal,
    onProgress: (step) => {
      progress.push(step);
      progressAtMs.push(performance.now());
      if (abortAfterMs !== null && step.checked === 0) {
        setTimeout(() => {
          abortedAt = performance.now();
          controller.abort();
        }, abortAfterMs);
      }
    },
  });
  await session.campaign();
  shuffler.release1();
  const monitor = latenessMonitor();
  const started = performance.now();
  let outcome;
  try {
    await session.fetchParameters(0);
    outcome = { checks: [] };
  } catch (error) {
    outcome = { checks: error.checks ?? null, error: error.name, message: error.message };
  }
  const ended = performance.now();
  return {
    ...outcome, ...monitor.stop(), progress, elapsedMs: ended - started,
    // The longest stretch between two progress steps: one level's bound, a single
    // synchronous piece of work in the Worker.
    longestStepMs: Math.max(0, ...progressAtMs.slice(1).map((at, i) => at - progressAtMs[i])),
    cancelMs: abortedAt === null ? null : ended - abortedAt,
  };
}

/**
 * The vector's level verdicts recomputed by the worker and then by the accountant in
 * this thread (blocking it): the same module, so the same doubles.
 * @param {number} index
 */
async function levelValues(index) {
  const { parameters: p, level_verdicts: verdicts } = VECTORS.parameters[index];
  const args = verdicts.map((v) => [v.level, v.lambda, p.set_size, p.honest_users, p.m,
    p.privacy_domain_size, { mode: p.blanket_mode ?? "slots", delta: p.delta }]);
  const inWorker = [];
  for (const a of args) inWorker.push(await defaultRunner().userDelta(a));
  const { userDelta } = await import("../src/accountant/index.js");
  return { inWorker, inPage: args.map((a) => userDelta(...a)) };
}

/** A runner whose worker cannot load: the request must fail, not hang. */
async function brokenWorker() {
  const runner = new AccountantRunner({
    createWorker: () => new Worker(new URL("./no-such-worker.js", import.meta.url), { type: "module" }),
  });
  try {
    await runner.userDelta([1, 0.5, 2, 1000, 1, 20, {}]);
    return { error: null };
  } catch (error) {
    return { error: error.name, message: error.message };
  }
}

window.workerCheck = { check, levelValues, brokenWorker };
document.body.dataset.ready = "true";
