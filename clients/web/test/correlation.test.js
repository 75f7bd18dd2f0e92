// The correlation ratio R a campaign guards against (docs/protocol.md section 5.1): absent
// means 1; a configuration may ask for 1 to 1000; the parameters must repeat the
// configuration's value (docs/wire.md section 7), like every field they copy from it.
import assert from "node:assert/strict";
import { test } from "node:test";

import { readConfig, readKeyConfig, readView } from "../src/answers.js";
import { documentHash } from "../src/canonical.js";
import { makePolicy } from "../src/policy.js";
import { verifyCampaign, verifyParameters } from "../src/verify.js";
import { KEY_CONFIG, VECTORS, checksOf, recordedUserDelta, viewOf } from "../harness/vectors.js";

const HONEST = VECTORS.parameters[0];

/** `vector`'s view with configuration and parameters changed, every hash recomputed. */
async function changed(vector, configChanges, parameterChanges) {
  const config = { ...vector.config, ...configChanges };
  const configHash = await documentHash(config);
  const parameters = { ...vector.parameters, ...parameterChanges, config_hash: configHash };
  return viewOf(vector, { config, config_hash: configHash, parameters,
    parameters_hash: await documentHash(parameters) });
}

function round2(view) {
  const parsed = readView(view);
  return verifyParameters(parsed, {
    levelIndex: 0, keyId: KEY_CONFIG.key_id, configHash: parsed.config_hash, policy: makePolicy(),
    userDelta: recordedUserDelta(HONEST).userDelta,
  });
}

test("an absent correlation ratio reads as 1", () => {
  assert.equal(HONEST.config.correlation_ratio, undefined);
  assert.equal(readConfig(HONEST.config).correlation_ratio, 1);
  assert.equal(readConfig({ ...HONEST.config, correlation_ratio: 3 }).correlation_ratio, 3);
});

test("round 1: a correlation ratio from 1 to 1000", async () => {
  const hpke = readKeyConfig(KEY_CONFIG);
  const run = async (ratio) => {
    const view = readView(await changed(HONEST, { correlation_ratio: ratio }, {}));
    return checksOf(verifyCampaign(view, hpke, view.id, { policy: makePolicy() }));
  };
  assert.deepEqual(await run(3), []);
  assert.deepEqual(await run(1000), []);
  assert.deepEqual(await run(0.5), ["correlation_ratio"]);
  assert.deepEqual(await run(1001), ["correlation_ratio"]);
});

test("round 2: the parameters repeat the configuration's correlation ratio", async () => {
  assert.deepEqual(await checksOf(round2(await changed(HONEST, {}, {}))), []);
  assert.deepEqual(await checksOf(round2(await changed(HONEST, { correlation_ratio: 3 },
    { correlation_ratio: 3 }))), []);
  assert.deepEqual(await checksOf(round2(await changed(HONEST, { correlation_ratio: 3 }, {}))),
    ["correlation_ratio"]);
  assert.deepEqual(await checksOf(round2(await changed(HONEST, {}, { correlation_ratio: 2 }))),
    ["correlation_ratio"]);
});
