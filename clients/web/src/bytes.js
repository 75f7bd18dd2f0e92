// @ts-check
// Byte strings as the wire format writes them (docs/wire.md section 1): hex for hashes,
// base64url without padding for keys and ciphertexts.

const encoder = new TextEncoder();

/**
 * UTF-8 bytes of a string.
 * @param {string} text @returns {Uint8Array}
 */
export function utf8(text) {
  return encoder.encode(text);
}

/**
 * Lowercase hex of bytes.
 * @param {Uint8Array} bytes @returns {string}
 */
export function toHex(bytes) {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * Bytes of an even-length hex string.
 * @param {string} hex @returns {Uint8Array}
 */
export function fromHex(hex) {
  if (hex.length % 2 !== 0 || /[^0-9a-fA-F]/.test(hex)) {
    throw new TypeError(`not a hex string: ${hex.slice(0, 16)}...`);
  }
  const out = new Uint8Array(hex.length / 2);
  for (let i = 0; i < out.length; i += 1) out[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return out;
}

const ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/**
 * Base64url without padding (RFC 4648 section 5).
 * @param {Uint8Array} bytes @returns {string}
 */
export function toBase64url(bytes) {
  let out = "";
  for (let i = 0; i < bytes.length; i += 3) {
    const chunk = (bytes[i] << 16) | ((bytes[i + 1] ?? 0) << 8) | (bytes[i + 2] ?? 0);
    const chars = Math.min(4, Math.ceil(((bytes.length - i) * 8) / 6));
    for (let j = 0; j < chars; j += 1) out += ALPHABET[(chunk >> (18 - 6 * j)) & 63];
  }
  return out;
}

/**
 * Bytes of canonical base64url without padding; anything else (padding, other
 * characters, non-zero trailing bits) is refused, as the services refuse it.
 * @param {string} text @returns {Uint8Array}
 */
export function fromBase64url(text) {
  if (/[^A-Za-z0-9_-]/.test(text) || text.length % 4 === 1) {
    throw new TypeError("not canonical base64url without padding");
  }
  const out = new Uint8Array(Math.floor((text.length * 6) / 8));
  let bits = 0;
  let value = 0;
  let index = 0;
  for (const char of text) {
    value = (value << 6) | ALPHABET.indexOf(char);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[index] = (value >> bits) & 0xff;
      index += 1;
    }
  }
  if ((value & ((1 << bits) - 1)) !== 0) throw new TypeError("non-canonical base64url");
  return out;
}

/**
 * The concatenation of byte strings.
 * @param {...Uint8Array} parts @returns {Uint8Array}
 */
export function concat(...parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let offset = 0;
  for (const part of parts) {
    out.set(part, offset);
    offset += part.length;
  }
  return out;
}

/**
 * Big-endian unsigned integer of `length` bytes.
 * @returns {Uint8Array}
 */
export function i2osp(value, length) {
  const out = new Uint8Array(length);
  let rest = value;
  for (let i = length - 1; i >= 0; i -= 1) {
    out[i] = rest % 256;
    rest = Math.floor(rest / 256);
  }
  if (rest !== 0) throw new RangeError(`${value} does not fit in ${length} bytes`);
  return out;
}

/**
 * SHA-256 of bytes.
 * @param {Uint8Array} bytes @returns {Promise<Uint8Array>}
 */
export async function sha256(bytes) {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
}
