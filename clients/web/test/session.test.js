// A user's whole session against an in-memory shuffler (harness/fake-shuffler.js) that
// opens what the client sends: both rounds with a resume in between, idempotent retries,
// refusals that send nothing, the shuffler's counts, and the endings of a campaign.

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  CampaignEndedError, HttpError, ProtocolError, ServiceUnreachableError, StateError, UsageError,
  VerificationError,
} from "../src/errors.js";
import { Session } from "../src/session.js";
import { FakeShuffler, decodePlaintext } from "../harness/fake-shuffler.js";
import { VECTORS, recordedUserDelta } from "../harness/vectors.js";

const HONEST = VECTORS.parameters[0]; // slots blanket, s = 2, d = 8 with padding, 3 levels
const LAMBDA_RAISED = VECTORS.parameters[2];
const URL = "https://shuffler.example";

function options(shuffler, extra = {}) {
  return {
    shufflerUrl: URL, campaignId: shuffler.id, serverKey: shuffler.serverKey, fetch: shuffler.fetch,
    userDelta: recordedUserDelta(shuffler.vector).userDelta,
    retry: { initialDelayMs: 1, maxDelayMs: 2 }, sleep: async () => {}, ...extra,
  };
}

const submissionsOf = (shuffler) => shuffler.requests.filter((r) => r.path.endsWith("/submissions"));

test("both rounds, resumed from the saved state in between", async () => {
  const shuffler = await FakeShuffler.create(HONEST);
  const saved = [];
  const session = new Session(options(shuffler, { onStateChange: (state) => saved.push(state) }));
  assert.equal(session.state, null);
  await session.campaign();
  assert.equal(saved.length, 0); // nothing to resume before enrollment
  await session.enroll("invite-1");
  const sent1 = await session.submitLevel(2);
  assert.deepEqual(sent1, { levelIndex: 2, reportedLevel: 2 });
  // enrolled; round 1 on its way (recorded before it left); round 1 stored
  assert.deepEqual(saved.map((state) => state.round1), [null, "unknown", "stored"]);
  assert.deepEqual(saved.at(-1), session.state);
  const [round1] = shuffler.submissions[1].values();
  assert.deepEqual(decodePlaintext(round1.level), { kind: 1, value: 2 });

  shuffler.release1();
  const resumed = await Session.resume(JSON.stringify(saved.at(-1)), options(shuffler, { campaignId: undefined }));
  assert.deepEqual(resumed.state, saved.at(-1));
  assert.deepEqual(resumed.level, { levelIndex: 2, reportedLevel: 2 });
  await resumed.waitForPhase("round2", { intervalMs: 1 });
  const parameters = await resumed.fetchParameters();
  assert.equal(parameters.messages_per_user, 3);
  const sent2 = await resumed.submitData(["café", "plain", "café"]);
  assert.deepEqual(sent2.items, [0, 7]);
  assert.equal(sent2.slots.length, 3);
  const [round2] = shuffler.submissions[2].values();
  assert.equal(round2.token, round1.token);
  assert.deepEqual(decodePlaintext(round2.level), { kind: 1, value: 2 }); // round 1's report again
  assert.deepEqual(round2.data.map(decodePlaintext),
    sent2.slots.map((slot) => (slot === null ? { kind: 0, value: 0 } : { kind: 2, value: slot })));
  // the round-2 requests: the views and statuses, one submission, nothing else
  const bodies = submissionsOf(shuffler).map((r) => Object.keys(r.body).sort().join(","));
  assert.deepEqual(bodies, ["level", "data,level"]);
});

test("a lost enrollment answer is retried into the same token", async () => {
  const shuffler = await FakeShuffler.create(HONEST);
  shuffler.fault("enroll", "lost");
  const session = new Session(options(shuffler));
  await session.enroll("invite-1");
  const enrollments = shuffler.requests.filter((r) => r.path.endsWith("/enrollments"));
  assert.equal(enrollments.length, 2);
  assert.deepEqual(enrollments[0].body, enrollments[1].body);
  assert.match(enrollments[0].body.token, /^[A-Za-z0-9_-]{43}$/);
  assert.equal(shuffler.tokens.size, 1);
  assert.ok(session.enrolled);
});

test("a submission whose answer was lost counts as done when the retry meets already-submitted", async () => {
  const shuffler = await FakeShuffler.create(HONEST);
  const session = new Session(options(shuffler));
  await session.enroll("invite-1");
  shuffler.fault("submit1", "lost");
  await session.submitLevel(0);
  const posts = submissionsOf(shuffler);
  assert.equal(posts.length, 2);
  assert.equal(posts[0].body.level, posts[1].body.level); // the same sealed body, not a new draw
  assert.equal(shuffler.submissions[1].size, 1);
  assert.deepEqual(session.level, { levelIndex: 0, reportedLevel: 0 });
});

test("refusals of the shuffler surface as HttpError with the problem document", async () => {
  const shuffler = await FakeShuffler.create(HONEST);
  const session = new Session(options(shuffler));
  const error = await session.enroll("not-an-invitation").catch((e) => e);
  assert.ok(error instanceof HttpError);
  assert.equal(error.problem, "invalid-invitation");
  assert.equal(error.document.status, 403);
  assert.equal(session.state, null);
  // a rate limit is waited out, Retry-After included
  const waits = [];
  const limited = new Session(options(shuffler, { sleep: async (ms) => waits.push(ms) }));
  shuffler.fault("enroll", new Response(JSON.stringify({ type: "urn:segshuffle:error:rate-limited" }),
    { status: 429, headers: { "retry-after": "2" } }));
  await limited.enroll("invite-1");
  assert.deepEqual(waits, [2000]);
  // and a shuffler that stays unavailable exhausts the time budget
  const clock = { t: 0 };
  const patient = new Session(options(shuffler, {
    now: () => clock.t, sleep: async (ms) => { clock.t += ms; }, retry: { budgetMs: 10000 },
  }));
  shuffler.fault("view", ...Array(1000).fill("down"));
  await assert.rejects(patient.campaign(), ServiceUnreachableError);
  assert.equal(clock.t, 10000);
});

test("a relay that substitutes its own key is refused before anything is sent", async () => {
  const shuffler = await FakeShuffler.create(HONEST);
  const pair = await crypto.subtle.generateKey({ name: "X25519" }, true, ["deriveBits"]);
  const raw = new Uint8Array(await crypto.subtle.exportKey("raw", pair.publicKey));
  const { keyId } = await import("../src/hpke.js");
  const { toBase64url } = await import("../src/bytes.js");
  const forged = { key_id: await keyId(raw), kem_id: 32, kdf_id: 1, aead_id: 1, public_key: toBase64url(raw) };
  shuffler.tamper.view = (view) => ({ ...view, key_id: forged.key_id, hpke_config: forged });
  shuffler.tamper.keyConfig = () => forged;
  const session = new Session(options(shuffler));
  await session.enroll("invite-1");
  const error = await session.submitLevel(1).catch((e) => e);
  assert.ok(error instanceof VerificationError);
  assert.equal(error.check, "signature");
  assert.equal(submissionsOf(shuffler).length, 0);
  // without the server's key the first view is trusted, but a key id known out of band pins it
  const pinned = new Session(options(shuffler, { serverKey: null, keyId: "0123456789abcdef" }));
  await assert.rejects(pinned.campaign(), (e) => e instanceof VerificationError && e.check === "key");
});

test("parameters that under-protect a level are refused, and round 2 sends nothing", async () => {
  const shuffler = await FakeShuffler.create(LAMBDA_RAISED);
  const session = new Session(options(shuffler));
  await session.enroll("invite-1");
  await session.submitLevel(1); // another level than the weakened one: refused all the same
  shuffler.release1();
  const error = await session.submitData([1]).catch((e) => e);
  assert.ok(error instanceof VerificationError);
  assert.deepEqual(error.checks, ["lambdas"]);
  assert.equal(shuffler.submissions[2].size, 0);
  assert.equal(submissionsOf(shuffler).length, 1);
});

test("the shuffler's own counts bound the server's claims", async () => {
  const shuffler = await FakeShuffler.create(HONEST);
  const session = new Session(options(shuffler));
  await session.enroll("invite-1");
  await session.submitLevel(0);
  shuffler.release1();
  shuffler.round1Participants = 999; // the parameters claim n = 1000
  await assert.rejects(session.fetchParameters(), (e) => e.check === "round1_participants");
  shuffler.round1Participants = null;
  shuffler.round2Required = 899; // below n_min = 900
  await assert.rejects(session.fetchParameters(), (e) => e.check === "release_threshold");
  shuffler.round2Required = 900;
  await session.fetchParameters();
});

test("an ending is believed only when the server signed it", async () => {
  const shuffler = await FakeShuffler.create(HONEST);
  const session = new Session(options(shuffler));
  await session.campaign();
  shuffler.abort("aborted by the administrator");
  const ended = await session.waitForPhase("round2", { intervalMs: 1 }).catch((e) => e);
  assert.ok(ended instanceof CampaignEndedError);
  assert.equal(ended.reason, "aborted by the administrator");
  shuffler.tamper.view = (view) => ({ ...view, end_reason: "forged" });
  await assert.rejects(session.waitForPhase("round2", { intervalMs: 1 }),
    (e) => e instanceof VerificationError && e.check === "signature");
});

test("a malformed answer is a ProtocolError; misuse is a UsageError", async () => {
  const shuffler = await FakeShuffler.create(HONEST);
  shuffler.tamper.view = (view) => ({ ...view, config: { ...view.config, set_size: "2" } });
  const session = new Session(options(shuffler));
  await assert.rejects(session.campaign(), (e) => e instanceof ProtocolError && /set_size/.test(e.message));
  await assert.rejects(session.submitLevel(0), UsageError); // not enrolled
  assert.throws(() => new Session({ ...options(shuffler), campaignId: "../admin" }), UsageError);
  assert.throws(() => new Session({ ...options(shuffler), serverKey: "short" }), UsageError);
  shuffler.tamper.view = (view) => view;
  await session.campaign();
  assert.throws(() => session.itemIds("café"), UsageError);
  assert.throws(() => session.itemIds([8]), /outside/);
  assert.throws(() => session.itemIds(["tea"]), /unknown item/);
  assert.deepEqual(session.itemIds([3, "東京"]), [3, 3]);
});

test("a resumed session keeps its pins and refuses a changed campaign", async () => {
  const shuffler = await FakeShuffler.create(HONEST);
  const session = new Session(options(shuffler));
  await session.enroll("invite-1");
  await session.submitLevel(1);
  const state = session.state;
  await assert.rejects(Session.resume({ ...state, level_index: 0 }, options(shuffler)), StateError);
  await assert.rejects(Session.resume(state, { ...options(shuffler), campaignId: "other" }), StateError);
  await assert.rejects(Session.resume(state, { ...options(shuffler), serverKey: "A".repeat(43) }),
    /another server key/);
  await assert.rejects(Session.resume(state, { ...options(shuffler), keyId: "0".repeat(16) }),
    /pins key id|expected key/);
  const resumed = await Session.resume(state, options(shuffler));
  shuffler.tamper.view = (view) => ({ ...view, config_hash: "00".repeat(32) });
  await assert.rejects(resumed.campaign(), (e) => e instanceof VerificationError);
});
