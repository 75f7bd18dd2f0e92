// @ts-check
// The server's document signatures (docs/wire.md section 9): the signed messages and
// their Ed25519 verification on WebCrypto. Which signatures a view must carry, and the
// refusal naming the check, are verify.js's verifySignatures.

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
