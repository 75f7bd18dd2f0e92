// The session knows what it sent. A submission resolves only once the shuffler holds it;
// after a lost answer it is resent, same token and same sealed body, within the wait
// budget (a time), and already-submitted then means stored. The saved state records each
// round before anything of it leaves, so a reloaded page resumes at the right step: it
// never sends a stored round again, and sends one of unknown outcome again as it was.
// When a service took 40-70 s to come back after a kill, users whose submission had been
// stored before the kill used to run out of tries and get an error.

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  HttpError, ServiceUnreachableError, SubmissionRefusedError, SubmissionUnknownError, UsageError,
} from "../src/errors.js";
import { Session } from "../src/session.js";
import { FakeShuffler } from "../harness/fake-shuffler.js";
import { VECTORS, recordedUserDelta } from "../harness/vectors.js";

const HONEST = VECTORS.parameters[0];
const URL = "https://shuffler.example";

function problem(status, name) {
  return new Response(JSON.stringify({ type: `urn:segshuffle:error:${name}`, status }),
    { status, headers: { "content-type": "application/problem+json" } });
}

async function world() {
  const clock = { t: 5_000_000 };
  clock.now = () => clock.t;
  clock.sleep = async (ms) => {
    clock.t += ms;
  };
  const shuffler = await FakeShuffler.create(HONEST, { now: clock.now });
  const saved = [];
  const options = (extra = {}) => ({
    shufflerUrl: URL, campaignId: shuffler.id, serverKey: shuffler.serverKey, fetch: shuffler.fetch,
    userDelta: recordedUserDelta(HONEST).userDelta, retry: { initialDelayMs: 200, maxDelayMs: 5000 },
    sleep: clock.sleep, now: clock.now, onStateChange: (state) => saved.push(JSON.stringify(state)), ...extra,
  });
  return { clock, shuffler, saved, options };
}

/** A user enrolled and in round 2 with verified parameters. */
async function inRound2(w, extra) {
  const session = new Session(w.options(extra));
  await session.enroll("invite-1");
  await session.submitLevel(1);
  w.shuffler.release1();
  await session.fetchParameters();
  return session;
}

test("a submission stored before a 60 s restart, whose answer was lost, is stored", async () => {
  const w = await world();
  const session = await inRound2(w);
  w.shuffler.fault("submit2", "lost");
  w.shuffler.outage("submit2", w.clock.t + 60000);
  const started = w.clock.t;
  const sent = await session.submitData(["café", "plain"]);
  assert.ok(w.clock.t - started >= 60000);
  assert.equal(session.outcome(2), "stored");
  assert.equal(w.shuffler.submissions[2].size, 1); // counted once
  const posts = w.shuffler.posts(2);
  assert.ok(posts.length > 4 && posts.every((body) => JSON.stringify(body) === JSON.stringify(posts[0])));
  assert.deepEqual(w.saved.slice(-2).map((text) => JSON.parse(text).round2), ["unknown", "stored"]);
  assert.equal(sent.slots.length, 3);
});

test("a 503 after the shuffler stored round 1 is stored too", async () => {
  const w = await world();
  const session = new Session(w.options());
  await session.enroll("invite-1");
  w.shuffler.fault("submit1", "stored-503");
  w.shuffler.outage("submit1", w.clock.t + 45000);
  await session.submitLevel(2);
  assert.equal(session.outcome(1), "stored");
  assert.equal(w.shuffler.submissions[1].size, 1);
  // enrolled, the campaign's pins, round 1 on its way (before anything left), stored
  const states = w.saved.map((text) => JSON.parse(text));
  assert.deepEqual(states.map((state) => state.round1), [null, null, "unknown", "stored"]);
  const [, , unknown, stored] = states;
  assert.equal(unknown.round1, "unknown"); // recorded before anything left
  assert.deepEqual(unknown.round1_body, w.shuffler.posts(1)[0]);
  assert.equal(unknown.reported_level, 2);
  assert.equal(stored.round1, "stored");
  assert.equal(stored.round1_body, null);
});

test("an unknown outcome is settled by a reloaded page that sends the same submission", async () => {
  const w = await world();
  const session = await inRound2(w, { waitBudgetMs: 30000 });
  w.shuffler.fault("submit2", "lost");
  w.shuffler.outage("submit2", w.clock.t + 300000);
  const error = await session.submitData(["café"]).catch((e) => e);
  assert.ok(error instanceof SubmissionUnknownError, String(error));
  assert.equal(error.stored, null);
  assert.equal(session.outcome(2), "unknown");
  const state = JSON.parse(w.saved.at(-1));
  assert.equal(state.round2, "unknown");
  assert.deepEqual(state.round2_body, w.shuffler.posts(2)[0]);

  w.clock.t += 300000; // the page is reloaded once the shuffler is back
  const reloaded = await Session.resume(w.saved.at(-1), w.options());
  assert.equal(reloaded.outcome(2), "unknown");
  const sent = await reloaded.submitData(["naïve"]); // the recorded submission, not a new draw
  assert.equal(reloaded.outcome(2), "stored");
  assert.deepEqual({ items: sent.items, slots: sent.slots }, state.round2_sent);
  assert.deepEqual(w.shuffler.posts(2).at(-1), state.round2_body);
  const posts = w.shuffler.posts(2).length;
  assert.deepEqual(await reloaded.submitData(["café"]), sent); // stored: not sent again
  assert.equal(w.shuffler.posts(2).length, posts);
  assert.equal(w.shuffler.submissions[2].size, 1);
  assert.equal(JSON.parse(w.saved.at(-1)).round2, "stored");
});

test("a reloaded page resumes at the right step", async () => {
  const w = await world();
  const session = new Session(w.options({ waitBudgetMs: 10000 }));
  await session.enroll("invite-1");
  w.shuffler.fault("submit1", ...Array(100).fill("down")); // never answered
  await assert.rejects(session.submitLevel(0), SubmissionUnknownError);
  const unknown = w.saved.at(-1);
  assert.equal(JSON.parse(unknown).round1, "unknown");
  w.shuffler.faults.clear();
  // reloaded: round 1 of unknown outcome is sent again, as it was
  const again = await Session.resume(unknown, w.options());
  await assert.rejects(again.submitLevel(1), UsageError); // it was sent with level 0
  assert.deepEqual(await again.submitLevel(0), { levelIndex: 0, reportedLevel: 0 });
  assert.deepEqual([...w.shuffler.submissions[1].values()].length, 1);
  assert.deepEqual(w.shuffler.posts(1).at(-1), JSON.parse(unknown).round1_body);
  // reloaded again: round 1 is stored and not sent again; round 2 goes ahead
  const later = await Session.resume(w.saved.at(-1), w.options());
  assert.equal(later.outcome(1), "stored");
  const posts = w.shuffler.posts(1).length;
  await later.submitLevel(0);
  assert.equal(w.shuffler.posts(1).length, posts);
  w.shuffler.release1();
  await later.waitForPhase("round2", { intervalMs: 1 });
  await later.submitData([2]);
  assert.equal(later.outcome(2), "stored");
  assert.equal(w.shuffler.submissions[2].size, 1);
});

test("a refusal is not stored, and the round may be sent anew", async () => {
  const w = await world();
  const session = await inRound2(w);
  w.shuffler.fault("submit2", problem(422, "wrong-submission-size"));
  const error = await session.submitData([1]).catch((e) => e);
  assert.ok(error instanceof SubmissionRefusedError && error instanceof HttpError, String(error));
  assert.equal(error.stored, false);
  assert.equal(error.problem, "wrong-submission-size");
  assert.equal(session.outcome(2), null);
  assert.equal(JSON.parse(w.saved.at(-1)).round2_sent, null);
  await session.submitData([1]);
  assert.equal(session.outcome(2), "stored");
  assert.equal(w.shuffler.submissions[2].size, 1);
});

test("no try reaching the shuffler is not stored", async () => {
  const w = await world();
  const session = new Session(w.options({ waitBudgetMs: 20000 }));
  await session.enroll("invite-1");
  w.shuffler.fault("submit1", ...Array(1000).fill("refused"));
  const error = await session.submitLevel(1).catch((e) => e);
  assert.ok(error instanceof ServiceUnreachableError, String(error));
  assert.equal(error.stored, false);
  assert.equal(session.outcome(1), null);
  assert.deepEqual(session.level, { levelIndex: null, reportedLevel: null });
});

test("the round ending after a lost answer leaves the outcome unknown", async () => {
  const w = await world();
  const session = new Session(w.options());
  await session.enroll("invite-1");
  w.shuffler.fault("submit1", "lost", problem(409, "wrong-phase"));
  const error = await session.submitLevel(2).catch((e) => e);
  assert.ok(error instanceof SubmissionUnknownError, String(error));
  assert.equal(error.lastError.problem, "wrong-phase");
  assert.equal(session.outcome(1), "unknown");
  w.shuffler.release1();
  const sent = await session.submitData([0]); // round 2 repeats the recorded report
  assert.equal(sent.reportedLevel, 2);
  assert.equal(w.shuffler.submissions[2].size, 1);
});
