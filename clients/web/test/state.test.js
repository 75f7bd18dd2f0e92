// The saved-session document: the Python SDK's own documents load (same fields, same
// checksum), version 1 documents too, a saved one round-trips, and an altered or
// mismatched one is refused.

import assert from "node:assert/strict";
import { test } from "node:test";

import { StateError } from "../src/errors.js";
import { pythonFloat, restoreState, saveState, stateChecksum } from "../src/state.js";

// Saved by the Python SDK (segshuffle.client.session.UserSession.state) for the key of
// docs/test-vectors.json: round 1 stored, round 2 sent and its outcome unknown.
const FROM_PYTHON = {
  format: "segshuffle-client-state", version: 2, campaign_id: "vectors-slots",
  token: "tok_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", level_index: 2, reported_level: 1,
  hpke_config: { key_id: "abd6f2ca9d44c7ba", kem_id: 32, kdf_id: 1, aead_id: 1,
    public_key: "4DhZ6-HPBBh67SlyvZl2C_-jUiy06l4bYtXCm-GyryM" },
  config_hash: "c47ec7ec3c5e872d3b0f889270237b06f1233bbc24042754322fef099c2bf673",
  server_key: "A6EHv_POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg", key_id_pin: null,
  min_fake_tolerance: 0.05, round1: "stored", round1_body: null, round2: "unknown",
  round2_body: { level: "A".repeat(107), data: ["B".repeat(107), "C".repeat(107), "D".repeat(107)] },
  round2_sent: { items: [0, 7], slots: [7, null, 3] },
  checksum: "8ca867f76e5ceac32521c616ed6ade8a881f3f6e6a3e49b3e2fe1656b3d84fb7",
};
// The same saved by a version-1 SDK (no record of the rounds).
const FROM_PYTHON_V1 = {
  format: "segshuffle-client-state", version: 1, campaign_id: "vectors-slots",
  token: "tok_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", level_index: 2, reported_level: 1,
  hpke_config: { key_id: "abd6f2ca9d44c7ba", kem_id: 32, kdf_id: 1, aead_id: 1,
    public_key: "4DhZ6-HPBBh67SlyvZl2C_-jUiy06l4bYtXCm-GyryM" },
  config_hash: "c47ec7ec3c5e872d3b0f889270237b06f1233bbc24042754322fef099c2bf673",
  server_key: "A6EHv_POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg", key_id_pin: null,
  min_fake_tolerance: 0.05,
  checksum: "abbde6e273d6f07b776ef5770a9a2f757f837828479da9a0e9c42384497e8015",
};
const ENROLLED_ONLY = {
  format: "segshuffle-client-state", version: 1, campaign_id: "c-1",
  token: "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", level_index: null, reported_level: null,
  hpke_config: null, config_hash: null, server_key: null, key_id_pin: null, min_fake_tolerance: 0,
  checksum: "913bb5d762cb8f8fdc9673faa0e711db2b694ef3ba5ec1a8ae9f63a4aa1df71f",
};

test("documents saved by the Python SDK load, and saving gives their checksum", async () => {
  const restored = await restoreState(JSON.stringify(FROM_PYTHON));
  assert.equal(restored.campaignId, "vectors-slots");
  assert.equal(restored.key.keyId, "abd6f2ca9d44c7ba");
  assert.deepEqual([restored.levelIndex, restored.reportedLevel], [2, 1]);
  assert.equal(restored.serverKey, FROM_PYTHON.server_key);
  assert.equal(restored.minFakeTolerance, 0.05);
  assert.deepEqual(restored.outcomes, { 1: "stored", 2: "unknown" });
  assert.deepEqual(restored.bodies, { 1: null, 2: FROM_PYTHON.round2_body });
  assert.deepEqual(restored.sent2, FROM_PYTHON.round2_sent);
  const { checksum, format, version, ...fields } = FROM_PYTHON;
  assert.deepEqual(await saveState(fields), FROM_PYTHON);
  // version 1: round 1 is stored when the level report is there, round 2 not known
  const old = await restoreState(FROM_PYTHON_V1);
  assert.deepEqual(old.outcomes, { 1: "stored", 2: null });
  assert.equal(old.sent2, null);
  assert.equal(await stateChecksum(ENROLLED_ONLY), ENROLLED_ONLY.checksum); // 0 written 0.0
  const bare = await restoreState(ENROLLED_ONLY, { campaignId: "c-1", minFakeTolerance: 0.1 });
  assert.equal(bare.key, null);
  assert.deepEqual(bare.outcomes, { 1: null, 2: null });
  assert.equal(bare.minFakeTolerance, 0.1); // the stricter applies
});

test("floats are written as Python writes them", () => {
  const cases = [[0, "0.0"], [0.1, "0.1"], [1e-5, "1e-05"], [1e-4, "0.0001"], [1e16, "1e+16"],
    [123.5, "123.5"], [9.5e15, "9500000000000000.0"], [1.5e16, "1.5e+16"], [5e-324, "5e-324"],
    [0.3333333333333333, "0.3333333333333333"], [-2.5, "-2.5"], [1, "1.0"]];
  for (const [value, text] of cases) assert.equal(pythonFloat(value), text, String(value));
});

test("an altered, foreign or inconsistent document is refused", async () => {
  const refuse = (document, pattern, options) =>
    assert.rejects(restoreState(document, options), (e) => e instanceof StateError && pattern.test(e.message));
  await refuse("{", /not a JSON document/);
  await refuse([], /JSON object/);
  await refuse({ ...FROM_PYTHON, format: "other" }, /not a segshuffle-client-state/);
  await refuse({ ...FROM_PYTHON, version: 3 }, /version 3/);
  await refuse({ ...FROM_PYTHON, version: 1 }, /unexpected or missing fields round1/);
  await refuse({ ...FROM_PYTHON, extra: 1 }, /unexpected or missing fields extra/);
  await refuse({ ...FROM_PYTHON, level_index: 0 }, /checksum/);
  await refuse(FROM_PYTHON, /campaign "vectors-slots", not "other"/, { campaignId: "other" });
  await refuse(FROM_PYTHON, /another server key/, { serverKey: "B".repeat(43) });
  await refuse(FROM_PYTHON, /expected key/, { keyId: "0".repeat(16) });
  const consistent = async (changes) => {
    const { checksum, ...rest } = { ...FROM_PYTHON, ...changes };
    return { ...rest, checksum: await stateChecksum(rest) };
  };
  await refuse(await consistent({ reported_level: 1, level_index: null }), /needs a level_index/);
  await refuse(await consistent({ config_hash: null }), /go together/);
  await refuse(await consistent({ token: "two words" }), /printable line/);
  await refuse(await consistent({ campaign_id: "../x" }), /not a campaign id/);
  await refuse(await consistent({ min_fake_tolerance: 1 }), /min_fake_tolerance/);
  await refuse(await consistent({ hpke_config: { ...FROM_PYTHON.hpke_config, key_id: "0".repeat(16) } }),
    /key_id does not match/);
  await refuse(await consistent({ hpke_config: { key_id: 1 } }), /not a key config/);
  await refuse(await consistent({ round1: "sent" }), /round1 must be null/);
  await refuse(await consistent({ round1: "unknown" }), /round1_body goes with an unknown outcome/);
  await refuse(await consistent({ round2: "stored" }), /round2_body goes with an unknown outcome/);
  await refuse(await consistent({ round2_body: { level: "A" } }), /not a round-2 submission/);
  await refuse(await consistent({ round2_body: { level: "A", data: ["not base64!"] } }), /not a ciphertext/);
  await refuse(await consistent({ round2: null, round2_body: null }), /round2_sent goes with a sent round 2/);
  await refuse(await consistent({ round2_sent: { items: [-1], slots: [] } }), /item ids/);
  await refuse(await consistent({ level_index: null, reported_level: null }), /needs the level_index/);
});
