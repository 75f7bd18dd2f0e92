// @ts-check
// HPKE (RFC 9180) base mode with DHKEM(X25519, HKDF-SHA256), HKDF-SHA256 and
// AES-128-GCM, one single-shot Seal per message (docs/wire.md section 4), on WebCrypto
// alone: X25519 for the Diffie-Hellman, HMAC-SHA256 for HKDF, AES-GCM for the AEAD.

import { concat, fromBase64url, i2osp, sha256, toHex, utf8 } from "./bytes.js";

const KEM_ID = 0x0020;
const KDF_ID = 0x0001;
const AEAD_ID = 0x0001;
const KEY_BYTES = 16; // Nk of AES-128-GCM
const NONCE_BYTES = 12; // Nn
const HASH_BYTES = 32; // Nh of HKDF-SHA256
const MODE_BASE = 0x00;
const VERSION = utf8("HPKE-v1");
const KEM_SUITE = concat(utf8("KEM"), i2osp(KEM_ID, 2));
const HPKE_SUITE = concat(utf8("HPKE"), i2osp(KEM_ID, 2), i2osp(KDF_ID, 2), i2osp(AEAD_ID, 2));
// PKCS #8 wrapping of a raw X25519 private key (RFC 8410): WebCrypto imports no raw form.
const X25519_PKCS8_PREFIX = new Uint8Array([
  0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x6e, 0x04, 0x22, 0x04, 0x20,
]);

async function hmac(key, data) {
  const handle = await crypto.subtle.importKey(
    "raw", key.length ? key : new Uint8Array(HASH_BYTES), { name: "HMAC", hash: "SHA-256" },
    false, ["sign"]);
  return new Uint8Array(await crypto.subtle.sign("HMAC", handle, data));
}

function labeledExtract(suite, salt, label, ikm) {
  return hmac(salt, concat(VERSION, suite, utf8(label), ikm));
}

async function labeledExpand(suite, prk, label, info, length) {
  // HKDF-Expand with L <= Nh: one block, T(1) = HMAC(PRK, info || 0x01).
  if (length > HASH_BYTES) throw new RangeError("one HKDF block at most");
  const labeled = concat(i2osp(length, 2), VERSION, suite, utf8(label), info);
  return (await hmac(prk, concat(labeled, new Uint8Array([1])))).slice(0, length);
}

/**
 * An X25519 private key from its 32 raw bytes (extractable: its public half is read
 * from the JWK export).
 * @param {Uint8Array} raw @returns {Promise<CryptoKey>}
 */
export function importPrivateKey(raw, extractable = true) {
  if (raw.length !== 32) throw new RangeError("an X25519 private key has 32 bytes");
  return crypto.subtle.importKey("pkcs8", concat(X25519_PKCS8_PREFIX, raw), { name: "X25519" },
    extractable, ["deriveBits"]);
}

/**
 * An X25519 public key from its 32 raw bytes.
 * @returns {Promise<CryptoKey>}
 */
export function importPublicKey(raw) {
  if (raw.length !== 32) throw new RangeError("an X25519 public key has 32 bytes");
  return crypto.subtle.importKey("raw", raw, { name: "X25519" }, true, []);
}

async function publicBytesOf(privateKey) {
  const jwk = await crypto.subtle.exportKey("jwk", privateKey);
  return fromBase64url(/** @type {string} */ (jwk.x)); // JWK members are unpadded base64url
}

async function keySchedule(sharedSecret, info) {
  const pskIdHash = await labeledExtract(HPKE_SUITE, new Uint8Array(), "psk_id_hash", new Uint8Array());
  const infoHash = await labeledExtract(HPKE_SUITE, new Uint8Array(), "info_hash", info);
  const context = concat(new Uint8Array([MODE_BASE]), pskIdHash, infoHash);
  const secret = await labeledExtract(HPKE_SUITE, sharedSecret, "secret", new Uint8Array());
  const key = await labeledExpand(HPKE_SUITE, secret, "key", context, KEY_BYTES);
  const nonce = await labeledExpand(HPKE_SUITE, secret, "base_nonce", context, NONCE_BYTES);
  return { key, nonce };
}

async function sharedSecretOf(dh, enc, recipientPublic) {
  const prk = await labeledExtract(KEM_SUITE, new Uint8Array(), "eae_prk", dh);
  return labeledExpand(KEM_SUITE, prk, "shared_secret", concat(enc, recipientPublic), HASH_BYTES);
}

async function aesGcm(direction, key, nonce, data) {
  const handle = await crypto.subtle.importKey("raw", key, { name: "AES-GCM" }, false, [direction]);
  const params = { name: "AES-GCM", iv: nonce, additionalData: new Uint8Array(), tagLength: 128 };
  const out = direction === "encrypt"
    ? await crypto.subtle.encrypt(params, handle, data)
    : await crypto.subtle.decrypt(params, handle, data);
  return new Uint8Array(out);
}

/**
 * Seal one plaintext to the recipient's raw public key under `info`: `enc || ct`.
 * A fresh, non-extractable ephemeral key is drawn unless `ephemeralPrivateKey` (raw bytes, for test
 * vectors only) is given.
 * @param {Uint8Array} recipientPublic @param {Uint8Array} info @param {Uint8Array} plaintext
 * @param {Uint8Array} [ephemeralPrivateKey]
 * @returns {Promise<Uint8Array>}
 */
export async function seal(recipientPublic, info, plaintext, ephemeralPrivateKey) {
  let privateKey;
  let enc;
  if (ephemeralPrivateKey === undefined) {
    // Not extractable: the private half is used once, for this Diffie-Hellman, and no
    // code can read it out. The public half (enc) is exportable whatever the flag.
    const pair = /** @type {CryptoKeyPair} */ (
      await crypto.subtle.generateKey({ name: "X25519" }, false, ["deriveBits"]));
    privateKey = pair.privateKey;
    enc = new Uint8Array(await crypto.subtle.exportKey("raw", pair.publicKey));
  } else {
    privateKey = await importPrivateKey(ephemeralPrivateKey);
    enc = await publicBytesOf(privateKey);
  }
  const publicKey = await importPublicKey(recipientPublic);
  const dh = new Uint8Array(await crypto.subtle.deriveBits({ name: "X25519", public: publicKey },
    privateKey, 256));
  const { key, nonce } = await keySchedule(await sharedSecretOf(dh, enc, recipientPublic), info);
  return concat(enc, await aesGcm("encrypt", key, nonce, plaintext));
}

/**
 * Open `enc || ct` with the recipient's raw private key (what the server does; here for
 * tests). @returns {Promise<Uint8Array>}
 */
export async function open(recipientPrivate, info, ciphertext) {
  const privateKey = await importPrivateKey(recipientPrivate);
  const recipientPublic = await publicBytesOf(privateKey);
  const enc = ciphertext.slice(0, 32);
  const dh = new Uint8Array(await crypto.subtle.deriveBits(
    { name: "X25519", public: await importPublicKey(enc) }, privateKey, 256));
  const { key, nonce } = await keySchedule(await sharedSecretOf(dh, enc, recipientPublic), info);
  return aesGcm("decrypt", key, nonce, ciphertext.slice(32));
}

/** The key id: the first 8 bytes of SHA-256 of the raw public key, in hex. */
export async function keyId(publicKey) {
  return toHex((await sha256(publicKey)).slice(0, 8));
}

/**
 * info = "segshuffle/v1" 0 campaign_id 0 round 0 key_id 0 context_hash (docs/wire.md 4).
 * @param {string} campaignId @param {1 | 2} round @param {string} keyIdHex
 * @param {Uint8Array} contextHash 32 raw bytes
 */
export function buildInfo(campaignId, round, keyIdHex, contextHash) {
  if (contextHash.length !== 32) throw new RangeError("the context hash has 32 bytes");
  if (round !== 1 && round !== 2) throw new RangeError("round is 1 or 2");
  const zero = new Uint8Array([0]);
  return concat(utf8("segshuffle/v1"), zero, utf8(campaignId), zero, utf8(String(round)), zero,
    utf8(keyIdHex), zero, contextHash);
}
