// @ts-check
// RFC 8785 (JSON Canonicalization Scheme) and the document hashes built on it
// (docs/wire.md sections 1.1 and 2).
//
// ECMAScript's own serialisation is what RFC 8785 prescribes for numbers
// (Number.prototype.toString) and strings (JSON.stringify's escapes), so only the member
// order (UTF-16 code units, JavaScript's default string order) and the refusals are
// written here.

import { sha256, toHex, utf8 } from "./bytes.js";

/**
 * The canonical form of a JSON value.
 * @param {unknown} value @returns {string}
 */
export function canonicalize(value) {
  if (value === null || typeof value === "boolean") return JSON.stringify(value);
  if (typeof value === "number") {
    // Every JSON number here is an IEEE 754 double already (1e21 included); a document
    // with integers beyond 2^53 - 1 hashes as the doubles they parse to, which the
    // services never publish (docs/wire.md 1.1).
    if (!Number.isFinite(value)) throw new TypeError("NaN and infinities are not JSON");
    return JSON.stringify(value);
  }
  if (typeof value === "string") {
    if (!wellFormed(value)) throw new TypeError("lone surrogates are not allowed");
    return JSON.stringify(value);
  }
  if (Array.isArray(value)) return `[${value.map(canonicalize).join(",")}]`;
  if (typeof value === "object") {
    const names = Object.keys(value).sort();
    return `{${names.map((name) => `${canonicalize(name)}:${canonicalize(value[name])}`).join(",")}}`;
  }
  throw new TypeError(`not a JSON value: ${typeof value}`);
}

/**
 * SHA-256 of a document's canonical UTF-8 bytes, as 64 lowercase hex characters
 * (`config_hash`, `parameters_hash`).
 * @param {unknown} document @returns {Promise<string>}
 */
export async function documentHash(document) {
  return toHex(await sha256(utf8(canonicalize(document))));
}

/**
 * Whether `text` has no lone surrogates (String.prototype.isWellFormed: Node 20, every
 * current browser).
 * @param {string} text @returns {boolean}
 */
function wellFormed(text) {
  return /** @type {{ isWellFormed(): boolean }} */ (/** @type {unknown} */ (text)).isWellFormed();
}
