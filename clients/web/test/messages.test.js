// The randomizers and the sealed submissions: set fitting, slot geometry of both blanket
// modes, variable size, the refusal of small sets without padding, randomized response,
// the CSPRNG's unbiased integers, and bodies that open only in their own context.

import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { test } from "node:test";

import { fromBase64url, fromHex } from "../src/bytes.js";
import { UsageError } from "../src/errors.js";
import { buildInfo, open } from "../src/hpke.js";
import {
  dataSlots, fitSet, fixedSizeSlots, keepProbability, randomizeLevel, reportLevel, round1Body,
  round2Body,
} from "../src/messages.js";
import { Random, secureRandom } from "../src/random.js";

const VECTORS = JSON.parse(
  await readFile(new URL("../../../docs/test-vectors.json", import.meta.url), "utf8"));
const HPKE = VECTORS.hpke[0];
const KEY = { keyId: HPKE.key_id, publicKey: fromHex(HPKE.public_key) };

const parameters = (changes = {}) => ({
  set_size: 3, domain_size: 10, privacy_domain_size: 13, padding_items: 3, m: 1.5,
  blanket_mode: "slots", lambdas: [0.25, 1.0], fixed_size: true, ...changes,
});

test("a set is fitted to exactly s distinct items, padded from d..d+s-1", () => {
  for (let i = 0; i < 200; i += 1) {
    const fitted = fitSet([4, 4, 7], 3, 10);
    assert.equal(fitted.length, 3);
    assert.ok(fitted.includes(4) && fitted.includes(7));
    assert.ok(fitted[2] >= 10 && fitted[2] <= 12, String(fitted));
    const down = fitSet([0, 1, 2, 3, 4, 5], 2, 10);
    assert.equal(new Set(down).size, 2);
    assert.ok(down.every((j) => j <= 5));
    assert.deepEqual(down, [...down].sort((a, b) => a - b));
  }
  assert.deepEqual(fitSet([], 2, 5).sort(), [5, 6]);
  assert.throws(() => fitSet([10], 2, 10), UsageError);
  assert.throws(() => fitSet([1.5], 2, 10), UsageError);
});

test("fixed-size submissions carry s + ceil(m) slots, or s + D independent ones", () => {
  for (let i = 0; i < 50; i += 1) {
    const { items, slots } = dataSlots([1, 2], parameters(), 0);
    assert.equal(items.length, 3);
    assert.equal(slots.length, 3 + 2);
    slots.slice(0, 3).forEach((slot, k) => assert.ok(slot === null || slot === items[k]));
    slots.slice(3).forEach((slot) => assert.ok(slot === null || (slot >= 0 && slot < 13)));
    const independent = dataSlots([1, 2], parameters({ blanket_mode: "independent", m: 2 }), 1);
    assert.equal(independent.slots.length, 3 + 13);
    assert.deepEqual(independent.slots.slice(0, 3), independent.items); // lambda = 1
    independent.slots.slice(3).forEach((slot, t) => assert.ok(slot === null || slot === t));
  }
});

test("variable-size submissions carry only the sent slots, at least one", () => {
  const none = dataSlots([1], parameters({ fixed_size: false, lambdas: [0, 0], m: 0 }), 0);
  assert.deepEqual(none.slots, [null]);
  const all = dataSlots([1, 2, 3], parameters({ fixed_size: false, lambdas: [1, 1], m: 0 }), 0);
  assert.deepEqual(all.slots, [1, 2, 3]);
});

test("without padding a set smaller than s is refused before anything is sealed", () => {
  assert.throws(() => dataSlots([1, 2], parameters({ padding_items: 0, privacy_domain_size: 10 }), 0),
    /no padding ids/);
  const { slots } = dataSlots([1, 2, 3], parameters({ padding_items: 0, privacy_domain_size: 10 }), 1);
  assert.deepEqual(slots.slice(0, 3), [1, 2, 3]);
});

test("the Poisson and blanket rates are those published", () => {
  let kept = 0;
  let sent = 0;
  const trials = 4000;
  for (let i = 0; i < trials; i += 1) {
    const slots = fixedSizeSlots([1, 2, 3, 4], 0.3, 0.6, 20, "slots");
    kept += slots.slice(0, 4).filter((s) => s !== null).length;
    sent += slots[4] === null ? 0 : 1;
  }
  const rate = kept / (4 * trials);
  assert.ok(Math.abs(rate - 0.3) < 0.03, String(rate));
  assert.ok(Math.abs(sent / trials - 0.6) < 0.04, String(sent / trials));
});

test("randomized response keeps the level at e^eps / (e^eps + K - 1)", () => {
  const trials = 6000;
  const counts = [0, 0, 0];
  for (let i = 0; i < trials; i += 1) counts[randomizeLevel(1, 3, 1.0)] += 1;
  const p = keepProbability(1.0, 3);
  assert.ok(Math.abs(counts[1] / trials - p) < 0.03, String(counts));
  assert.ok(Math.abs(counts[0] - counts[2]) < 0.1 * trials, String(counts));
  assert.equal(reportLevel(2, { levels: [1, 2, 3], level_privacy: null }), 2);
  assert.throws(() => reportLevel(3, { levels: [1, 2, 3], level_privacy: null }), UsageError);
});

test("integers are unbiased: words above the last multiple of n are rejected", () => {
  // n = 3: 2^32 mod 3 = 1, so the word 2^32 - 1 lies beyond the last whole multiple of 3
  let filled = 0;
  const random = new Random((array) => {
    array.fill(0);
    array.set([0xffffffff, 0xffffffff, 4]);
    filled += 1;
    return array;
  });
  assert.equal(random.below(3), 1); // two rejections, then 4 mod 3
  assert.equal(random.below(3), 0); // the pool's next word, 0
  assert.equal(filled, 1);
  const counts = new Array(6).fill(0);
  for (let i = 0; i < 12000; i += 1) counts[secureRandom.below(6)] += 1;
  assert.ok(counts.every((c) => Math.abs(c - 2000) < 200), String(counts));
  assert.equal(new Set(secureRandom.sample([1, 2, 3, 4, 5], 5)).size, 5);
  const u = secureRandom.uniform();
  assert.ok(u >= 0 && u < 1);
});

test("bodies open under their round's info only", async () => {
  const view = {
    id: HPKE.campaign_id, config_hash: "11".repeat(32), parameters_hash: "22".repeat(32),
  };
  const one = await round1Body(view, KEY, 2);
  const info1 = buildInfo(view.id, 1, KEY.keyId, fromHex(view.config_hash));
  const opened = await open(fromHex(HPKE.private_key), info1, fromBase64url(one.level));
  assert.deepEqual([...opened.slice(0, 6)], [1, 1, 0, 0, 0, 2]);
  const two = await round2Body(view, KEY, 2, [5, null]);
  const info2 = buildInfo(view.id, 2, KEY.keyId, fromHex(view.parameters_hash));
  assert.equal(two.data.length, 2);
  const item = await open(fromHex(HPKE.private_key), info2, fromBase64url(two.data[0]));
  const empty = await open(fromHex(HPKE.private_key), info2, fromBase64url(two.data[1]));
  assert.deepEqual([...item.slice(0, 6)], [1, 2, 0, 0, 0, 5]);
  assert.deepEqual([...empty.slice(0, 6)], [1, 0, 0, 0, 0, 0]);
  await assert.rejects(open(fromHex(HPKE.private_key), info1, fromBase64url(two.level)));
});
