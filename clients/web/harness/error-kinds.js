// What an app receives from the web client when something goes wrong, in a browser page
// (tests/test_web_errors.py drives it in headless Chromium and breaks things around it:
// the network, the shuffler, its answers). Each call runs one Session step and reports
// how it ended: the value, or the error's kind and what it carries, with the tries the
// page's fetch saw (and whether the browser said it was online at each).

import { Session } from "../src/index.js";

/** Every request of the page's sessions: { path, online, at } (ms since the call began). */
let tries = [];
let started = 0;

function countingFetch(input, init) {
  const url = new URL(typeof input === "string" ? input : input.url);
  tries.push({ path: url.pathname, online: navigator.onLine, at: Math.round(performance.now() - started) });
  return fetch(input, init);
}

function describe(error) {
  return {
    name: error.name,
    check: error.check ?? null,
    checks: error.checks ?? null,
    status: error.status ?? null,
    problem: error.problem ?? null,
    document: error.document ?? null,
    stored: error.stored ?? null,
    attempts: error.attempts ?? null,
    waitedMs: error.waitedMs ?? null,
    lastError: error.lastError?.name ?? null,
    message: String(error.message),
  };
}

/** Run `step`, reporting { ok, value | error, tries, elapsedMs }. */
async function attempt(step) {
  tries = [];
  started = performance.now();
  let outcome;
  try {
    const value = await step();
    outcome = { ok: true, value: value ?? null };
  } catch (error) {
    outcome = { ok: false, error: describe(error) };
  }
  return { ...outcome, tries, elapsedMs: Math.round(performance.now() - started) };
}

const session = (target, retry) => new Session({ ...target, retry, fetch: countingFetch });

/** Fetch and verify the campaign, with the given retry options. */
async function campaign(target, retry = {}) {
  const s = session(target, retry);
  return attempt(async () => (await s.campaign()).id);
}

/**
 * A round 1 sent twice with one token: the saved document from before the first send is
 * resumed and sends again, which the shuffler refuses (already-submitted) and the
 * session, having no record of a try that may have arrived, reports as refused.
 */
async function refusedSubmission(target, invitation) {
  const first = session(target, {});
  await first.campaign();
  await first.enroll(invitation);
  const before = first.state;
  await first.submitLevel(0);
  const again = await Session.resume(before, { ...target, fetch: countingFetch });
  return attempt(() => again.submitLevel(0));
}

window.errorKinds = { campaign, refusedSubmission };
document.body.dataset.ready = "true";
