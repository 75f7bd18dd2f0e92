// Test support (not part of the package): docs/test-vectors.json, its server key, and an
// accountant that answers from the vectors' records. Node reads the file; a page fetches
// it from /docs/test-vectors.json of its site (tests/test_web_worker.py serves it there).
//
// The recorded accountant answers with a vector's delta_user at each level E_k, and at a
// published epsilon below E_k with "protected" exactly for the (epsilon, lambda) points
// that the honest documents of the same setting publish. delta_user falls as epsilon
// grows, so a level that fails at E_k fails below it too; anything else is unprotected.

import { fromHex, toBase64url } from "../src/bytes.js";
import { VerificationError } from "../src/errors.js";

/** The JSON document at `url`: a file under Node, an HTTP resource in a page. */
async function readJson(url) {
  if (url.protocol !== "file:") return (await fetch(url)).json();
  const { readFile } = await import("node:fs/promises");
  return JSON.parse(await readFile(url, "utf8"));
}

export const VECTORS = await readJson(new URL("../../../docs/test-vectors.json", import.meta.url));

const HPKE = VECTORS.hpke[0];

/** The raw X25519 private key every vector is sealed to. */
export const PRIVATE_KEY = fromHex(HPKE.private_key);
export const PUBLIC_KEY = fromHex(HPKE.public_key);

/** The key config of the vectors' campaigns. */
export const KEY_CONFIG = Object.freeze({
  key_id: HPKE.key_id, kem_id: 32, kdf_id: 1, aead_id: 1, public_key: toBase64url(PUBLIC_KEY),
});

/** The round-2 view of a parameters `vector`, with `changes` laid over it. */
export function viewOf(vector, changes = {}) {
  return {
    id: vector.config.id, phase: "round2", config: vector.config, config_hash: vector.config_hash,
    key_id: KEY_CONFIG.key_id, hpke_config: KEY_CONFIG, parameters: vector.parameters,
    parameters_hash: vector.parameters_hash, ...changes,
  };
}

/** The checks a verification `promise` fails on ([] when it passes). */
export async function checksOf(promise) {
  try {
    await promise;
    return [];
  } catch (error) {
    if (!(error instanceof VerificationError)) throw error;
    return [...error.checks];
  }
}

/** The setting an accountant call belongs to. */
const settingOf = (p) => JSON.stringify([p.campaign_id, p.m, p.honest_users, p.delta, p.set_size,
  p.privacy_domain_size, p.blanket_mode ?? "slots"]);

const PROTECTED = new Set(VECTORS.parameters.filter((c) => c.client_accepts).flatMap((c) =>
  c.parameters.epsilons.map((eps, k) => `${settingOf(c.parameters)}|${eps}|${c.parameters.lambdas[k]}`)));

/**
 * The recorded accountant for one parameters vector, and the calls it received.
 * @param {object} vector an entry of VECTORS.parameters
 */
export function recordedUserDelta(vector) {
  const setting = settingOf(vector.parameters);
  const calls = [];
  const userDelta = (eps, lam, setSize, users, m, domainSize, { mode, delta }) => {
    calls.push({ eps, lam, setSize, users, m, domainSize, mode, delta });
    const verdict = vector.level_verdicts.find((v) => v.level === eps && v.lambda === lam);
    if (verdict) return verdict.delta_user;
    const level = vector.level_verdicts.find((v) => v.lambda === lam && eps < v.level);
    if (level && !level.holds) return level.delta_user;
    return PROTECTED.has(`${setting}|${eps}|${lam}`) ? delta : 1.0;
  };
  return { userDelta, calls };
}
