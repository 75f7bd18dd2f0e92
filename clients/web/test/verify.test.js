// The verification of docs/protocol.md section 6 against the `parameters` vectors of
// docs/test-vectors.json (honest and tampered documents with the checks a client must
// fail, in order), and each round-1 and round-2 check on a tampered document. The
// accountant is injected (harness/vectors.js): it answers from the vectors' records.

import assert from "node:assert/strict";
import { test } from "node:test";

import { readKeyConfig, readView } from "../src/answers.js";
import { toBase64url } from "../src/bytes.js";
import { documentHash } from "../src/canonical.js";
import { VerificationError } from "../src/errors.js";
import { makePolicy } from "../src/policy.js";
import { campaignMessage, endMessage, parametersMessage } from "../src/signatures.js";
import {
  verifyCampaign, verifyParameters, verifyReleaseThreshold, verifyRound1Count, verifySignatures,
} from "../src/verify.js";
import {
  KEY_CONFIG, PUBLIC_KEY, VECTORS, checksOf, recordedUserDelta, viewOf,
} from "../harness/vectors.js";

const HPKE = VECTORS.hpke[0];

/** A view of `vector` with its parameters changed and their hash recomputed. */
async function tampered(vector, changes) {
  const parameters = { ...vector.parameters, ...changes };
  return viewOf(vector, { parameters, parameters_hash: await documentHash(parameters) });
}

/** A view of `vector` with its configuration changed and its hash recomputed. */
async function reconfigured(vector, changes) {
  const config = { ...vector.config, ...changes };
  const configHash = await documentHash(config);
  const parameters = { ...vector.parameters, config_hash: configHash };
  return viewOf(vector, { config, config_hash: configHash, parameters,
    parameters_hash: await documentHash(parameters) });
}

function round2(view, vector, options = {}) {
  const parsed = readView(view);
  return verifyParameters(parsed, {
    levelIndex: 0, keyId: KEY_CONFIG.key_id, configHash: parsed.config_hash, policy: makePolicy(),
    userDelta: recordedUserDelta(vector).userDelta, ...options,
  });
}

const HONEST = VECTORS.parameters[0];

test("every parameters vector: the same refusals, naming the same checks", async () => {
  assert.equal(VECTORS.parameters.length, 33);
  let refused = 0;
  for (const vector of VECTORS.parameters) {
    const view = readView(viewOf(vector));
    const key = await verifyCampaign(view, readKeyConfig(KEY_CONFIG), vector.config.id,
      { policy: makePolicy() });
    assert.equal(key.keyId, HPKE.key_id);
    const { userDelta, calls } = recordedUserDelta(vector);
    for (let levelIndex = 0; levelIndex < vector.config.levels.length; levelIndex += 1) {
      const checks = await checksOf(verifyParameters(view, {
        levelIndex, keyId: view.key_id, configHash: view.config_hash, policy: makePolicy(), userDelta,
      }));
      assert.deepEqual(checks, vector.client_checks, `${vector.description} (level ${levelIndex})`);
    }
    if (!vector.client_accepts) refused += 1;
    if (vector.client_accepts) {
      // the accountant saw the published figures, h and the privacy domain
      const p = vector.parameters;
      assert.ok(calls.length >= p.levels.length);
      for (const call of calls) {
        assert.equal(call.users, p.honest_users);
        assert.equal(call.domainSize, p.privacy_domain_size);
        assert.equal(call.m, p.m);
        assert.equal(call.delta, p.delta);
        assert.equal(call.mode, p.blanket_mode ?? "slots");
      }
    }
  }
  assert.equal(refused, 21);
});

test("round 1: the campaign, its hash and its key", async () => {
  const hpke = readKeyConfig(KEY_CONFIG);
  const policy = makePolicy();
  const run = (view, id = HONEST.config.id, key = hpke) => checksOf(
    verifyCampaign(readView(view), key, id, { policy }));
  assert.deepEqual(await run(viewOf(HONEST)), []);
  assert.deepEqual(await run(viewOf(HONEST), "another"), ["campaign"]);
  assert.deepEqual(await run(viewOf(HONEST, { config_hash: "00".repeat(32) })), ["config_hash"]);
  assert.deepEqual(await run(viewOf(HONEST, { config: { ...HONEST.config, min_users: 101 } })),
    ["config_hash"]);
  assert.deepEqual(await run(viewOf(HONEST), HONEST.config.id, { ...hpke, key_id: "0".repeat(16) }),
    ["key"]);
  assert.deepEqual(await run(viewOf(HONEST), HONEST.config.id, { ...hpke, kem_id: 0x21 }), ["key"]);
  assert.deepEqual(await run(viewOf(HONEST, { key_id: "1".repeat(16) })), ["key"]);
  const other = { ...KEY_CONFIG, public_key: toBase64url(new Uint8Array(32).fill(9)) };
  assert.deepEqual(await run(viewOf(HONEST, { hpke_config: other })), ["key"]);
});

test("round 1: the default policy's floor and ceiling do not follow the server's min_users", async () => {
  // A server choosing min_users = 2 set the old default ceiling to 1 / 2: delta 0.4 passed.
  const hpke = readKeyConfig(KEY_CONFIG);
  const run = async (changes, policyOptions = {}) => {
    const view = readView(await reconfigured(HONEST, changes));
    return checksOf(verifyCampaign(view, hpke, view.id, { policy: makePolicy(policyOptions) }));
  };
  assert.deepEqual(await run({ min_users: 2, delta: 0.4 }), ["min_users", "delta"]);
  assert.deepEqual(await run({ min_users: 9 }), ["min_users"]); // below the shuffler's 10
  assert.deepEqual(await run({ min_users: 10, delta: 1e-3 }), []);
  assert.deepEqual(await run({ min_users: 100000, delta: 2e-3 }), ["delta"]);
  assert.deepEqual(await run({ min_users: 2, delta: 1e-3 }, { minUsers: 2 }), []);
  assert.deepEqual(await run({ min_users: 2, delta: 0.4 }, { minUsers: 2 }), ["delta"]);
});

test("round 1: the configuration must be creatable and within the app's policy", async () => {
  const hpke = readKeyConfig(KEY_CONFIG);
  const run = async (changes, policyOptions = {}, allowInsecure = false) => {
    const view = readView(await reconfigured(HONEST, changes));
    return checksOf(verifyCampaign(view, hpke, view.id, { policy: makePolicy(policyOptions), allowInsecure }));
  };
  assert.deepEqual(await run({}), []);
  assert.deepEqual(await run({ padding: false }), ["padding"]);
  assert.deepEqual(await run({ padding: false }, { allowUnpadded: true }), []);
  assert.deepEqual(await run({ fixed_size: false }), ["fixed_size"]);
  assert.deepEqual(await run({ fixed_size: false }, { allowVariableSize: true }), []);
  assert.deepEqual(await run({}, { minFakeTolerance: 0.2 }), ["fake_tolerance"]);
  assert.deepEqual(await run({}, { minUsers: 500 }), ["min_users"]);
  assert.deepEqual(await run({ delta: 0.05 }), ["delta"]); // above the default 1e-3
  assert.deepEqual(await run({ delta: 1e-6 }, { deltaCeiling: 1e-7 }), ["delta"]);
  const insecure = { insecure_parameters: { m: 0, lambdas: [1, 1, 1] } };
  assert.deepEqual(await run(insecure), ["insecure_parameters"]);
  assert.deepEqual(await run(insecure, {}, true), []);
  assert.deepEqual(await run({ levels: [0.5, 2.0, 1.0] }), ["levels"]);
  assert.deepEqual(await run({ levels: [0.5, 1.0, 40] }), ["levels"]);
  assert.deepEqual(await run({ set_size: 9 }), ["configuration"]); // more than d = 8
  assert.deepEqual(await run({ items: ["a", "a", "b", "c", "d", "e", "f", "g"] }), ["configuration"]);
  assert.deepEqual(await run({ domain_size: 9 }), ["configuration"]);
  assert.deepEqual(await run({ min_users: 1, dropout_tolerance: 1 }), ["min_users", "dropout_tolerance"]);
  assert.deepEqual(await run({ level_privacy: 0 }), ["level_privacy"]);
  const badId = await reconfigured(HONEST, { id: "-bad" });
  assert.deepEqual(await checksOf(verifyCampaign(readView({ ...badId, id: "-bad" }), hpke, "-bad",
    { policy: makePolicy() })), ["id"]);
});

test("round 2: hashes and pins", async () => {
  const parsed = readView(viewOf(HONEST));
  assert.deepEqual(await checksOf(round2(viewOf(HONEST), HONEST)), []);
  assert.deepEqual(await checksOf(round2(viewOf(HONEST, { parameters_hash: "00".repeat(32) }), HONEST)),
    ["parameters_hash"]);
  assert.deepEqual(await checksOf(round2(viewOf(HONEST), HONEST, { configHash: "00".repeat(32) })),
    ["config_hash"]);
  assert.deepEqual(await checksOf(round2(viewOf(HONEST), HONEST, { keyId: "0".repeat(16) })), ["key"]);
  assert.deepEqual(await checksOf(round2(viewOf(HONEST, { parameters: null, parameters_hash: null }),
    HONEST)), ["parameters"]);
  assert.deepEqual(await checksOf(round2(viewOf(HONEST), HONEST, { levelIndex: 3 })), ["level_index"]);
  assert.equal(parsed.parameters.users, 1000);
});

test("round 2: every field checked by its rule", async () => {
  const p = HONEST.parameters;
  const cases = [
    [{ set_size: 3 }, ["set_size"]],
    [{ padding_items: 0 }, ["padding_items"]],
    [{ level_privacy: 1.0 }, ["level_privacy"]],
    [{ fake_tolerance: 0 }, ["fake_tolerance"]], // h follows the configuration's f,
    [{ blanket_mode: "independent" }, ["blanket_mode"]],
    [{ m: 2000 }, ["m"]],
    [{ blanket_slots: 2 }, ["blanket_slots"]],
    [{ users: 2_000_000_000_000 }, ["users"]], // no delta rule for an impossible n
    [{ users: 99 }, ["users", "delta"]],
    [{ accounting_users: 901 }, ["accounting_users"]],
    [{ lambdas: [0.5, 1.2, 1] }, ["lambdas"]],
    [{ lambdas: [0.5, 1] }, ["lambdas"]],
    [{ delta: 0 }, ["delta"]],
    [{ insecure: true }, ["insecure"]],
    [{ epsilons: [0.5, 1.0, 2.5] }, ["epsilons"]],
    [{ epsilons: [0.5, 1.0, null] }, ["epsilons"]],
    [{ epsilons_lower: [0.1, 0.2] }, ["epsilons_lower"]],
    [{ mse_bound: -1 }, ["mse_bound"]],
    [{ epsilons_lower: [0.5, 0.6, 1.5] }, ["epsilons_lower"]], // above the verified 1.03
  ];
  for (const [changes, expected] of cases) {
    assert.deepEqual(await checksOf(round2(await tampered(HONEST, changes), HONEST)), expected,
      JSON.stringify(changes));
  }
  assert.equal(p.honest_users, 810);
});

test("round 2: the app's delta ceiling is fixed before the claimed count", async () => {
  // users 200 with delta 0.01 / 200 = 5e-5: the rule holds, the default ceiling 1 / 100 too
  const claimed = { users: 200, accounting_users: 180, honest_users: 162, delta: 5e-5 };
  const view = await tampered(HONEST, claimed);
  const checks = await checksOf(round2(view, HONEST, { policy: makePolicy({ deltaCeiling: 1e-5 }) }));
  assert.deepEqual(checks, ["delta"]);
});

test("round 2: insecure parameters only when the caller allows them", async () => {
  const config = { ...HONEST.config, insecure_parameters: { m: 0, lambdas: [1, 1, 1] } };
  const configHash = await documentHash(config);
  const parameters = { ...HONEST.parameters, config_hash: configHash, insecure: true, m: 0,
    blanket_slots: 0, messages_per_user: 2, lambdas: [1, 1, 1] };
  const view = viewOf(HONEST, { config, config_hash: configHash, parameters,
    parameters_hash: await documentHash(parameters) });
  const never = () => assert.fail("the accountant is not consulted");
  assert.deepEqual(await checksOf(round2(view, HONEST, { userDelta: never })), ["insecure_parameters"]);
  assert.deepEqual(await checksOf(round2(view, HONEST, { userDelta: never, allowInsecure: true })), []);
});

test("round 2: an accountant that fails refuses the parameters", async () => {
  const failing = () => {
    throw new RangeError("out of range");
  };
  const error = await round2(viewOf(HONEST), HONEST, { userDelta: failing }).catch((e) => e);
  assert.ok(error instanceof VerificationError);
  assert.equal(error.check, "lambdas");
  assert.match(error.message, /cannot be accounted: out of range/);
  // an asynchronous accountant is awaited
  const later = async () => 0;
  assert.deepEqual(await checksOf(round2(viewOf(HONEST), HONEST, { userDelta: later })), []);
});

test("the shuffler's round-1 count and release threshold", () => {
  const p = readView(viewOf(HONEST)).parameters;
  const status = { campaign_id: p.campaign_id, round: 1, participants: 1000, required: 100, released: true };
  verifyRound1Count(p, status);
  const refuse = (fn, check) => assert.throws(fn, (e) => e instanceof VerificationError && e.check === check);
  refuse(() => verifyRound1Count(p, { ...status, participants: 999 }), "round1_participants");
  refuse(() => verifyRound1Count(p, { ...status, released: false }), "round1_participants");
  refuse(() => verifyRound1Count(p, { ...status, round: 2 }), "round1_participants");
  refuse(() => verifyRound1Count(p, { ...status, campaign_id: "x" }), "round1_participants");
  verifyReleaseThreshold(p, { ...status, round: 2, required: 900 });
  refuse(() => verifyReleaseThreshold(p, { ...status, round: 2, required: 899 }), "release_threshold");
});

test("signatures: every applicable statement must be signed by the server", async () => {
  const pair = await crypto.subtle.generateKey({ name: "Ed25519" }, true, ["sign", "verify"]);
  const serverKey = new Uint8Array(await crypto.subtle.exportKey("raw", pair.publicKey));
  const sign = async (message) => toBase64url(new Uint8Array(
    await crypto.subtle.sign({ name: "Ed25519" }, pair.privateKey, message)));
  const base = viewOf(HONEST, { phase: "aborted", end_reason: "stopped" });
  const signatures = {
    campaign: await sign(campaignMessage(base.id, base.config_hash, base.key_id,
      PUBLIC_KEY)),
    parameters: await sign(parametersMessage(base.id, base.parameters_hash)),
    end: await sign(endMessage(base.id, "aborted", "stopped")),
  };
  const run = (view, options) => checksOf(verifySignatures(readView(view), serverKey, options));
  assert.deepEqual(await run({ ...base, signatures }, { parameters: true }), []);
  assert.deepEqual(await run({ ...base, signatures, parameters_hash: "00".repeat(32) },
    { parameters: true }), ["signature"]);
  assert.deepEqual(await run({ ...base, signatures, parameters_hash: "00".repeat(32) }), []);
  assert.deepEqual(await run({ ...base, signatures, end_reason: "other" }), ["signature"]);
  assert.deepEqual(await run({ ...base, signatures: { ...signatures, end: null } }), ["signature"]);
  assert.deepEqual(await run({ ...base, signatures, phase: "round2" }), []);
  assert.deepEqual(await run({ ...base, phase: "round2" }), ["signature"]);
  assert.deepEqual(await run({ ...base, signatures, key_id: KEY_CONFIG.key_id.toUpperCase() }),
    ["signature"]);
});
