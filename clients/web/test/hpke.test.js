// The ephemeral key of every seal: drawn fresh, and never extractable (only its public
// half, the enc, leaves WebCrypto).

import assert from "node:assert/strict";
import { test } from "node:test";

import { buildInfo, open, seal } from "../src/hpke.js";

test("a seal's ephemeral private key is not extractable, and the seal still opens", async () => {
  const recipient = /** @type {CryptoKeyPair} */ (
    await crypto.subtle.generateKey({ name: "X25519" }, true, ["deriveBits"]));
  const jwk = await crypto.subtle.exportKey("jwk", recipient.privateKey);
  const recipientPrivate = Buffer.from(jwk.d, "base64url");
  const recipientPublic = new Uint8Array(await crypto.subtle.exportKey("raw", recipient.publicKey));
  const drawn = [];
  const generateKey = crypto.subtle.generateKey;
  crypto.subtle.generateKey = async (...args) => {
    const pair = await generateKey.apply(crypto.subtle, args);
    drawn.push({ algorithm: args[0].name, pair });
    return pair;
  };
  let sealed;
  const info = buildInfo("campaign-1", 1, "0123456789abcdef", new Uint8Array(32));
  try {
    sealed = await seal(recipientPublic, info, new Uint8Array(32).fill(7));
  } finally {
    crypto.subtle.generateKey = generateKey;
  }
  assert.equal(drawn.length, 1);
  assert.equal(drawn[0].algorithm, "X25519");
  assert.equal(drawn[0].pair.privateKey.extractable, false);
  await assert.rejects(crypto.subtle.exportKey("pkcs8", drawn[0].pair.privateKey));
  const enc = new Uint8Array(await crypto.subtle.exportKey("raw", drawn[0].pair.publicKey));
  assert.deepEqual(sealed.slice(0, 32), enc);
  assert.deepEqual(await open(new Uint8Array(recipientPrivate), info, sealed), new Uint8Array(32).fill(7));
});
