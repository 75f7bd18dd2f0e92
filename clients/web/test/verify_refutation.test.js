// A check refuses parameters that an exhibited pair of datasets already shows unsafe,
// with the accountant's own refutingDelta, before any upper bound (docs/protocol.md
// section 6).

import assert from "node:assert/strict";
import { test } from "node:test";

import { readView } from "../src/answers.js";
import { documentHash } from "../src/canonical.js";
import { VerificationError } from "../src/errors.js";
import { makePolicy } from "../src/policy.js";
import { verifyParameters } from "../src/verify.js";
import { refutingDelta, userDelta } from "../src/accountant/index.js";
import { KEY_CONFIG, VECTORS, viewOf } from "../harness/vectors.js";

const HONEST = VECTORS.parameters[0];

test("a level an exhibited pair shows unsafe is refused, naming the pair", async () => {
  const parameters = { ...HONEST.parameters, lambdas: [1, 1, 1] };
  const view = readView(viewOf(HONEST, { parameters,
    parameters_hash: await documentHash(parameters) }));
  const error = await verifyParameters(view, {
    levelIndex: 0, keyId: KEY_CONFIG.key_id, configHash: view.config_hash, policy: makePolicy(),
  }).catch((e) => e);
  assert.ok(error instanceof VerificationError, String(error));
  assert.equal(error.check, "lambdas");
  assert.match(error.message, /delta_user>=[0-9.e-]+, shown by an exhibited pair of datasets/);
});

test("the refutation is a lower bound: never above the upper bound, null at or below delta", () => {
  const p = HONEST.parameters;
  const [s, h, m, d, delta] = [p.set_size, p.honest_users, p.m, p.privacy_domain_size, p.delta];
  for (const level of [0.25, 0.5, 1, 2]) {
    for (const lam of [0.05, 0.3, 0.7, 1]) {
      const lower = refutingDelta(level, lam, s, h, m, d, { delta });
      const upper = userDelta(level, lam, s, h, m, d, { delta });
      if (lower === null) continue;
      assert.ok(lower > delta && lower <= upper, `${level} ${lam}: ${lower} > ${upper}`);
    }
  }
  // the published rates are not refuted
  HONEST.parameters.lambdas.forEach((lam, k) => {
    assert.equal(refutingDelta(HONEST.config.levels[k], lam, s, h, m, d, { delta }), null);
  });
});
