// The server's document signatures (docs/wire.md section 9): the signed messages and
// their Ed25519 verification on WebCrypto.

import { concat, fromBase64url, fromHex, i2osp, utf8 } from "./bytes.js";

const ZERO = new Uint8Array([0]);

/** F(x): the length of x in 2 bytes, big-endian, then x. */
function field(bytes) {
  return concat(i2osp(bytes.length, 2), bytes);
}

function ascii(text) {
  if (/[^\x20-\x7e]/.test(text)) throw new TypeError(`not printable ASCII: ${text}`);
  return utf8(text);
}

/**
 * The message of the `campaign` signature.
 * @param {string} id @param {string} configHash 64 hex @param {string} keyId 16 hex
 * @param {Uint8Array} publicKey 32 raw bytes of hpke_config.public_key
 */
export function campaignMessage(id, configHash, keyId, publicKey) {
  return concat(utf8("segshuffle/v1/campaign-document"), ZERO, field(ascii(id)),
    field(fromHex(configHash)), field(fromHex(keyId)), field(publicKey));
}

/** The message of the `parameters` signature. */
export function parametersMessage(id, parametersHash) {
  return concat(utf8("segshuffle/v1/parameters-document"), ZERO, field(ascii(id)),
    field(fromHex(parametersHash)));
}

/** The message of the `end` signature (`endReason` null or a string). */
export function endMessage(id, phase, endReason) {
  const reason = endReason === null ? new Uint8Array([0])
    : concat(new Uint8Array([1]), field(utf8(endReason)));
  return concat(utf8("segshuffle/v1/campaign-end"), ZERO, field(ascii(id)), field(ascii(phase)),
    reason);
}

/**
 * Whether `signature` (unpadded base64url of 64 bytes) is the Ed25519 signature of
 * `message` under the raw 32-byte `publicKey`. A malformed signature is false.
 * @returns {Promise<boolean>}
 */
export async function verifySignature(publicKey, message, signature) {
  let raw;
  try {
    raw = fromBase64url(signature);
  } catch {
    return false;
  }
  if (raw.length !== 64) return false;
  const key = await crypto.subtle.importKey("raw", publicKey, { name: "Ed25519" }, false,
    ["verify"]);
  return crypto.subtle.verify({ name: "Ed25519" }, key, raw, message);
}

/**
 * Check a campaign view's signatures with the app's copy of the server's key: the
 * campaign signature always, the parameters signature once parameters are published, the
 * end signature in an ended phase. Throws naming the first that is missing or wrong.
 * @param {object} view the parsed campaign view @param {Uint8Array} serverKey
 */
export async function verifyViewSignatures(view, serverKey) {
  const signatures = view.signatures ?? {};
  const checks = [["campaign", campaignMessage(view.id, view.config_hash, view.key_id,
    fromBase64url(view.hpke_config.public_key))]];
  if (view.parameters_hash) checks.push(["parameters", parametersMessage(view.id, view.parameters_hash)]);
  if (["done", "failed", "aborted"].includes(view.phase)) {
    checks.push(["end", endMessage(view.id, view.phase, view.end_reason ?? null)]);
  }
  for (const [name, message] of checks) {
    const signature = signatures[name];
    if (typeof signature !== "string" || !(await verifySignature(serverKey, message, signature))) {
      throw new Error(`the view's ${name} signature is ${signature ? "wrong" : "missing"}`);
    }
  }
}
