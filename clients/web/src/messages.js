// @ts-check
// A user's sealed submissions (docs/protocol.md sections 2-3, docs/wire.md section 5).
//
// Round 1: one level message carrying the level index, or, when the campaign sets
// level_privacy eps_p, the index after K-ary randomized response.
//
// Round 2: the same reported level again (a fresh draw would tell the server more than
// round 1 did), and the data slots:
// 1. the item set fitted to exactly s items: duplicates dropped, a larger set sampled
//    down uniformly, a smaller one padded with distinct padding ids d..d+s-1. A campaign
//    without padding takes only sets of at least s items: a smaller one would send fewer
//    non-null messages than the accounting covers, so it is refused before sealing;
// 2. item i sent with probability lambda of the user's level, then the blanket slots of
//    the campaign's mode: ceil(m) slots each carrying a uniform item of the privacy
//    domain with probability m / ceil(m) (`slots`), or one slot per item t carrying t
//    with probability m / D (`independent`). Unsent slots are null messages, so every
//    user of every level sends exactly messages_per_user data ciphertexts; without
//    fixed_size only the sent slots travel (at least one message: a null).
// Every message is its own 32-byte plaintext sealed by its own HPKE call under an info
// that binds campaign, round, key id and the round's context hash.

import { fromHex, toBase64url } from "./bytes.js";
import { UsageError } from "./errors.js";
import { buildInfo, seal } from "./hpke.js";
import { Kind, encodePlaintext } from "./plaintext.js";
import { secureRandom } from "./random.js";
import { BlanketMode, blanketSlots, slotProbability } from "./rules.js";

/** @typedef {import("./random.js").Random} Random */
/** @typedef {import("./verify.js").PinnedKey} PinnedKey */
/** @typedef {import("./answers.js").View} View */
/** @typedef {NonNullable<View["parameters"]>} Parameters */

/** p = e^eps / (e^eps + K - 1): the chance that randomized response keeps the level. */
export function keepProbability(epsP, levelCount) {
  const e = Math.exp(epsP);
  return e / (e + levelCount - 1);
}

/**
 * K-ary randomized response on one level index.
 * @param {number} levelIndex @param {number} levelCount @param {number} epsP
 * @param {Random} [random] @returns {number}
 */
export function randomizeLevel(levelIndex, levelCount, epsP, random = secureRandom) {
  if (!(Number.isInteger(levelIndex) && levelIndex >= 0 && levelIndex < levelCount)) {
    throw new RangeError(`level index must be in [0, ${levelCount}), got ${levelIndex}`);
  }
  if (!(epsP > 0)) throw new RangeError(`level privacy eps_p must be > 0, got ${epsP}`);
  if (levelCount === 1 || random.uniform() < keepProbability(epsP, levelCount)) return levelIndex;
  const other = random.below(levelCount - 1);
  return other < levelIndex ? other : other + 1;
}

/**
 * The level index to send: exact, or through randomized response when the campaign
 * sets level_privacy.
 * @param {number} levelIndex @param {View["config"]} config @param {Random} [random]
 */
export function reportLevel(levelIndex, config, random = secureRandom) {
  const count = config.levels.length;
  if (!(Number.isInteger(levelIndex) && levelIndex >= 0 && levelIndex < count)) {
    throw new UsageError(`level index must be in [0, ${count}), got ${levelIndex}`);
  }
  if (config.level_privacy === null) return levelIndex;
  return randomizeLevel(levelIndex, count, config.level_privacy, random);
}

/**
 * A user's item set made exactly `setSize` items long (sorted): duplicates dropped, a
 * larger set sampled down uniformly, a smaller one padded with distinct ids drawn
 * uniformly from domainSize..domainSize+setSize-1.
 * @param {Iterable<number>} items ids in [0, domainSize) @param {number} setSize
 * @param {number} domainSize @param {Random} [random] @returns {number[]}
 */
export function fitSet(items, setSize, domainSize, random = secureRandom) {
  let unique = [...new Set(items)];
  for (const item of unique) {
    if (!(Number.isInteger(item) && item >= 0 && item < domainSize)) {
      throw new UsageError(`items must be ids in [0, ${domainSize}), got ${item}`);
    }
  }
  if (unique.length > setSize) {
    unique = random.sample(unique, setSize);
  } else if (unique.length < setSize) {
    const padding = Array.from({ length: setSize }, (_, i) => domainSize + i);
    unique = unique.concat(random.sample(padding, setSize - unique.length));
  }
  return unique.sort((a, b) => a - b);
}

/**
 * Every round-2 slot of one user: item i with probability `lambda` (else null), then the
 * blanket slots of `mode` (an unsent one null).
 * @param {readonly number[]} items the fitted set @param {number} lambda @param {number} m
 * @param {number} domainSize the privacy domain D @param {string} mode
 * @param {Random} [random] @returns {(number | null)[]}
 */
export function fixedSizeSlots(items, lambda, m, domainSize, mode, random = secureRandom) {
  if (!(lambda >= 0 && lambda <= 1)) throw new RangeError(`lambda must be in [0, 1], got ${lambda}`);
  const slots = items.map((item) => (random.bernoulli(lambda) ? item : null));
  const count = blanketSlots(m, domainSize, mode);
  const probability = slotProbability(m, domainSize, mode);
  for (let t = 0; t < count; t += 1) {
    if (!random.bernoulli(probability)) {
      slots.push(null);
    } else {
      slots.push(mode === BlanketMode.SLOTS ? random.below(domainSize) : t);
    }
  }
  return slots;
}

/**
 * (the fitted item set, the data slots to send) for a user at `levelIndex`.
 * @param {number[]} items @param {Parameters} parameters @param {number} levelIndex
 * @param {Random} [random] @returns {{ items: number[], slots: (number | null)[] }}
 */
export function dataSlots(items, parameters, levelIndex, random = secureRandom) {
  const s = parameters.set_size;
  const d = parameters.domain_size;
  const fitted = fitSet(items, s, d, random);
  const held = fitted.filter((item) => item < d).length;
  if (parameters.padding_items === 0 && held < s) {
    throw new UsageError(`this campaign has no padding ids: a set of ${held} items (fewer than `
      + `s = ${s}) would reveal its size, which the published epsilon does not cover; nothing `
      + "was sent");
  }
  let slots = fixedSizeSlots(fitted, parameters.lambdas[levelIndex], parameters.m,
    parameters.privacy_domain_size, parameters.blanket_mode, random);
  if (!parameters.fixed_size) {
    slots = slots.filter((slot) => slot !== null);
    if (slots.length === 0) slots = [null];
  }
  return { items: fitted, slots };
}

async function sealAll(key, info, plaintexts) {
  const sealed = await Promise.all(plaintexts.map((plaintext) => seal(key.publicKey, info, plaintext)));
  return sealed.map(toBase64url);
}

/**
 * The round-1 body `{level}`, bound to the configuration hash.
 * @param {View} view @param {PinnedKey} key @param {number} reportedLevel
 * @returns {Promise<{ level: string }>}
 */
export async function round1Body(view, key, reportedLevel) {
  const info = buildInfo(view.id, 1, key.keyId, fromHex(view.config_hash));
  const [level] = await sealAll(key, info, [encodePlaintext(Kind.LEVEL, reportedLevel)]);
  return { level };
}

/**
 * The round-2 body `{level, data}`, bound to the parameters hash.
 * @param {View} view @param {PinnedKey} key @param {number} reportedLevel
 * @param {readonly (number | null)[]} slots @returns {Promise<{ level: string, data: string[] }>}
 */
export async function round2Body(view, key, reportedLevel, slots) {
  if (view.parameters_hash === null) throw new UsageError("the round-2 parameters are not published");
  const info = buildInfo(view.id, 2, key.keyId, fromHex(view.parameters_hash));
  const plaintexts = [encodePlaintext(Kind.LEVEL, reportedLevel),
    ...slots.map((slot) => (slot === null ? encodePlaintext(Kind.NULL, 0)
      : encodePlaintext(Kind.ITEM, slot)))];
  const [level, ...data] = await sealAll(key, info, plaintexts);
  return { level, data };
}
