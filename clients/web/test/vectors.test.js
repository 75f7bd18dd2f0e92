// The wire layer against docs/test-vectors.json: every HPKE seal and opening, every
// canonical form and every document hash.

import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { test } from "node:test";

import { fromBase64url, fromHex, toBase64url, toHex } from "../src/bytes.js";
import { canonicalize, documentHash } from "../src/canonical.js";
import { buildInfo, keyId, open, seal } from "../src/hpke.js";
import { Kind, encodePlaintext } from "../src/plaintext.js";

const VECTORS = JSON.parse(
  await readFile(new URL("../../../docs/test-vectors.json", import.meta.url), "utf8"));
const KINDS = { null: Kind.NULL, level: Kind.LEVEL, item: Kind.ITEM };

test("every HPKE vector: info, plaintext, seal with its ephemeral key, and opening", async () => {
  assert.equal(VECTORS.hpke.length, 16);
  for (const vector of VECTORS.hpke) {
    const publicKey = fromHex(vector.public_key);
    assert.equal(await keyId(publicKey), vector.key_id);
    const info = buildInfo(vector.campaign_id, vector.round, vector.key_id,
      fromHex(vector.context_hash));
    assert.equal(toHex(info), vector.info, vector.role);
    const plaintext = fromHex(vector.plaintext);
    assert.deepEqual(encodePlaintext(KINDS[vector.kind], vector.value, plaintext.slice(6, 22)),
      plaintext, vector.role);
    const sealed = await seal(publicKey, info, plaintext, fromHex(vector.ephemeral_private_key));
    assert.equal(toBase64url(sealed), vector.ciphertext, vector.role);
    assert.equal(sealed.length, 80);
    const opened = await open(fromHex(vector.private_key), info, fromBase64url(vector.ciphertext));
    assert.deepEqual(opened, plaintext, vector.role);
  }
});

test("a fresh seal opens and differs every time", async () => {
  const vector = VECTORS.hpke[0];
  const info = fromHex(vector.info);
  const plaintext = encodePlaintext(Kind.ITEM, 3);
  const first = await seal(fromHex(vector.public_key), info, plaintext);
  const second = await seal(fromHex(vector.public_key), info, plaintext);
  assert.notDeepEqual(first, second);
  assert.deepEqual(await open(fromHex(vector.private_key), info, first), plaintext);
  const otherInfo = info.slice();
  otherInfo[otherInfo.length - 1] ^= 1; // another context hash: the message fails to open
  await assert.rejects(open(fromHex(vector.private_key), otherInfo, first));
});

test("every canonical JSON vector", async () => {
  assert.equal(VECTORS.canonical_json.length, 11);
  for (const vector of VECTORS.canonical_json) {
    assert.equal(canonicalize(vector.object), vector.canonical, vector.description);
    assert.equal(await documentHash(vector.object), vector.sha256, vector.description);
  }
});

test("every parameter document hashes to its published hashes", async () => {
  assert.ok(VECTORS.parameters.length >= 30);
  for (const vector of VECTORS.parameters) {
    assert.equal(await documentHash(vector.config), vector.config_hash, vector.description);
    assert.equal(await documentHash(vector.parameters), vector.parameters_hash,
      vector.description);
  }
});

test("canonical JSON refuses what RFC 8785 does not allow", () => {
  assert.throws(() => canonicalize(Number.NaN));
  assert.throws(() => canonicalize(Number.POSITIVE_INFINITY));
  assert.throws(() => canonicalize(undefined));
  assert.throws(() => canonicalize("\ud800"));
  assert.equal(canonicalize({ b: 1.0, a: [2e-6, 1e-7, 1e21, -0], "é": "\u0001" }),
    '{"a":[0.000002,1e-7,1e+21,0],"b":1,"é":"\\u0001"}');
});

test("base64url is canonical both ways", () => {
  for (const length of [0, 1, 2, 3, 31, 32, 80]) {
    const bytes = crypto.getRandomValues(new Uint8Array(length));
    assert.deepEqual(fromBase64url(toBase64url(bytes)), bytes);
  }
  assert.throws(() => fromBase64url("AA=="));
  assert.throws(() => fromBase64url("AB")); // non-zero trailing bits
  assert.throws(() => fromBase64url("A+"));
});
