// The session waits where waiting is right, for a time, and refuses only on a failed
// check. The campaign's view can say round 2 while the shuffler's round-1 status still
// says released: false (the shuffler is still recording the server's acknowledgement); a
// page that called waitForPhase("round2") then fetchParameters() used to refuse (check
// round1_participants) and send nothing, where the same call 3.5 s later was accepted.
// Time here is a fake clock that the sessions sleep on.

import assert from "node:assert/strict";
import { test } from "node:test";

import { ServiceUnreachableError, VerificationError, WaitTimeoutError } from "../src/errors.js";
import { DEFAULT_WAIT_BUDGET_MS, Session } from "../src/session.js";
import { FakeShuffler } from "../harness/fake-shuffler.js";
import { VECTORS, recordedUserDelta } from "../harness/vectors.js";

const HONEST = VECTORS.parameters[0]; // slots blanket, s = 2, d = 8 with padding, 3 levels
const URL = "https://shuffler.example";
/** More tries than the count-bounded retries of earlier versions made (6). */
const ATTEMPTS = 6;

function fakeClock() {
  const clock = { t: 1_000_000, sleeps: [] };
  clock.now = () => clock.t;
  clock.sleep = async (ms) => {
    clock.sleeps.push(ms);
    clock.t += ms;
  };
  return clock;
}

async function setup(extra = {}) {
  const clock = fakeClock();
  const shuffler = await FakeShuffler.create(HONEST, { now: clock.now });
  const accountant = recordedUserDelta(HONEST);
  const session = new Session({
    shufflerUrl: URL, campaignId: shuffler.id, serverKey: shuffler.serverKey, fetch: shuffler.fetch,
    userDelta: accountant.userDelta, retry: { initialDelayMs: 200, maxDelayMs: 5000 },
    sleep: clock.sleep, now: clock.now, ...extra,
  });
  await session.enroll("invite-1");
  await session.submitLevel(1);
  return { clock, shuffler, session, accountant };
}

const statusRequests = (shuffler) => shuffler.requests.filter((r) => r.path.endsWith("/rounds/1")).length;

test("a round-1 status that says released 3 s after the view says round 2 is waited for", async () => {
  const { clock, shuffler, session } = await setup();
  shuffler.release1({ statusLagMs: 3000 });
  const started = clock.t;
  await session.waitForPhase("round2", { intervalMs: 250 });
  assert.equal(clock.t, started); // the view says round 2 at once
  const parameters = await session.fetchParameters();
  assert.ok(clock.t - started >= 3000 && clock.t - started < 3000 + 5000);
  assert.equal(parameters.users, 1000);
  const sent = await session.submitData(["café", "plain"]);
  assert.deepEqual(sent.items, [0, 7]);
  assert.equal(shuffler.submissions[2].size, 1);
});

test("the wait is bounded by a time, not by a count of tries", async () => {
  const { clock, shuffler, session, accountant } = await setup({ waitBudgetMs: 30000 });
  shuffler.release1({ statusLagMs: Infinity }); // never says released
  const started = clock.t;
  const checks = accountant.calls.length;
  const error = await session.fetchParameters().catch((e) => e);
  assert.ok(error instanceof WaitTimeoutError, String(error));
  assert.equal(error.waitingFor, "round1-release");
  assert.match(error.message, /does not say released/);
  assert.equal(clock.t - started, 30000); // the last wait ends at the budget
  assert.ok(statusRequests(shuffler) > 2 * ATTEMPTS);
  assert.ok(Math.max(...clock.sleeps) <= 5000);
  // the accountant ran on the view once, not at every look
  assert.equal(accountant.calls.length - checks, HONEST.parameters.levels.length);
  assert.equal(session.parameters, null);
  assert.equal(shuffler.posts(2).length, 0);
  assert.equal(DEFAULT_WAIT_BUDGET_MS, 120000);
});

test("parameters not published yet are waited for", async () => {
  const { clock, shuffler, session } = await setup();
  shuffler.release1({ afterMs: 40000, statusLagMs: 20000 });
  const started = clock.t;
  await session.fetchParameters();
  assert.ok(clock.t - started >= 60000 && clock.t - started < 65000);
  await session.submitData([3]);
  assert.equal(shuffler.submissions[2].size, 1);
});

test("a 5xx during the check is a wait, for much longer than the tries of one request", async () => {
  const { clock, shuffler, session } = await setup();
  shuffler.release1();
  shuffler.outage("status1", clock.t + 70000); // the shuffler restarting on a busy host
  const started = clock.t;
  await session.fetchParameters();
  assert.ok(clock.t - started >= 70000 && clock.t - started < 75000);
  assert.ok(statusRequests(shuffler) > ATTEMPTS);
  await session.submitData([1]);
  assert.equal(shuffler.submissions[2].size, 1);
});

test("a reloaded page rides out a restart while it fetches the campaign again", async () => {
  const { clock, shuffler, session } = await setup();
  shuffler.release1();
  shuffler.outage("view", clock.t + 50000);
  const reloaded = await Session.resume(session.state, {
    shufflerUrl: URL, fetch: shuffler.fetch, userDelta: recordedUserDelta(HONEST).userDelta,
    sleep: clock.sleep, now: clock.now,
  });
  const started = clock.t;
  await reloaded.fetchParameters(); // the campaign's view and key, then the parameters
  assert.ok(clock.t - started >= 50000);
  await reloaded.submitData([4]);
  assert.equal(shuffler.submissions[2].size, 1);
});

test("Retry-After is waited in full, and one beyond the budget ends the wait at once", async () => {
  const busy = (seconds) => new Response(JSON.stringify({ type: "urn:segshuffle:error:unavailable" }),
    { status: 503, headers: { "retry-after": String(seconds) } });
  const { clock, shuffler, session } = await setup({ waitBudgetMs: 30000 });
  shuffler.release1();
  shuffler.fault("status1", busy(7), busy(7));
  await session.fetchParameters();
  assert.deepEqual(clock.sleeps.slice(-2), [7000, 7000]);
  clock.sleeps.length = 0;
  shuffler.fault("view", busy(600));
  const error = await session.fetchParameters().catch((e) => e);
  assert.ok(error instanceof ServiceUnreachableError, String(error));
  assert.equal(error.lastError.status, 503);
  assert.deepEqual(clock.sleeps, []);
});

test("a released status with too few participants, or a failed check, refuses at once", async () => {
  const { clock, shuffler, session } = await setup();
  shuffler.release1();
  shuffler.round1Participants = 999; // the parameters claim n = 1000
  await assert.rejects(session.fetchParameters(),
    (e) => e instanceof VerificationError && e.check === "round1_participants");
  shuffler.round1Participants = null;
  shuffler.round2Required = 899;
  await assert.rejects(session.fetchParameters(), (e) => e.check === "release_threshold");
  shuffler.round2Required = 900;
  // tampered parameters refuse at once even while round 1 does not say released yet
  shuffler.release1({ statusLagMs: Infinity });
  shuffler.tamper.parameters = (p) => ({ ...p, lambdas: [1, 1, 1] });
  await assert.rejects(session.submitData([1]),
    (e) => e instanceof VerificationError && e.check === "parameters_hash");
  assert.deepEqual(clock.sleeps, []);
  assert.equal(shuffler.posts(2).length, 0);
});

test("a phase wait rides out a restart within its timeout", async () => {
  const { clock, shuffler, session } = await setup();
  shuffler.release1({ afterMs: 10000 });
  shuffler.outage("view", clock.t + 20000);
  assert.equal((await session.waitForPhase("round2", { intervalMs: 500 })).phase, "round2");
  shuffler.outage("view", clock.t + 100000);
  const error = await session.waitForPhase("done", { timeoutMs: 60000 }).catch((e) => e);
  assert.ok(error instanceof ServiceUnreachableError, String(error));
  assert.ok(Math.round(error.waitedMs) <= 60000 && error.attempts > ATTEMPTS, String(error));
});
