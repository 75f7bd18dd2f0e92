// @ts-check
// The 32-byte plaintext of every message (docs/wire.md section 3).

export const PLAINTEXT_BYTES = 32;
export const NONCE_BYTES = 16;
const VERSION = 0x01;

/** Message kinds and their byte. */
export const Kind = Object.freeze({ NULL: 0, LEVEL: 1, ITEM: 2 });

/**
 * version, kind, value (uint32 big endian), 16-byte nonce, 10 zero bytes. The nonce is
 * drawn from the platform's CSPRNG unless given (test vectors).
 * @param {number} kind @param {number} value @param {Uint8Array} [nonce]
 * @returns {Uint8Array}
 */
export function encodePlaintext(kind, value, nonce = crypto.getRandomValues(new Uint8Array(NONCE_BYTES))) {
  if (!(/** @type {number[]} */ (Object.values(Kind))).includes(kind)) throw new RangeError(`unknown kind ${kind}`);
  if (!Number.isInteger(value) || value < 0 || value > 0xffffffff) {
    throw new RangeError("the value is an unsigned 32-bit integer");
  }
  if (kind === Kind.NULL && value !== 0) throw new RangeError("a null message has value 0");
  if (nonce.length !== NONCE_BYTES) throw new RangeError("the nonce has 16 bytes");
  const out = new Uint8Array(PLAINTEXT_BYTES);
  out[0] = VERSION;
  out[1] = kind;
  new DataView(out.buffer).setUint32(2, value, false);
  out.set(nonce, 6);
  return out;
}
