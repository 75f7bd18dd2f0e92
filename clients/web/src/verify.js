// @ts-check
// Every check a client makes before it sends anything that depends on what the server
// published (docs/protocol.md section 6). A failed check throws a VerificationError
// naming it (`check`, and `checks` when several failed), and nothing more is sent.
//
// Round 1 (verifyCampaign): the view is for the campaign asked about, its config_hash is
// the SHA-256 of its canonical configuration, the key config is well formed and its key
// id, the hash of its key, is the one the view pins; the configuration is one the server
// could have been asked to create, and within the app's policy (padding, fixed-size
// submissions, fake tolerance, min_users, delta ceiling, no insecure parameters).
//
// Round 2 (verifyParameters): the parameters hash to the announced hash, pin round 1's
// configuration and key, repeat the configuration, follow its geometry, claim counts
// that follow from the rules, use the campaign's delta, publish epsilons and rates in
// range, and protect every level, not only this user's: parameters are the same for
// everyone, and a server that under-protects one level would learn who sits at it from
// who refuses. Then the shuffler's own round-1 count and release threshold
// (verifyRound1Count, verifyReleaseThreshold). The accountant runs off the main thread
// (accountant_runner.js): the check reports its progress level by level and stops when
// the caller's signal aborts.

import { AccountantUnavailableError, defaultRunner } from "./accountant_runner.js";
import { fromBase64url } from "./bytes.js";
import { documentHash } from "./canonical.js";
import { paddingItems, privacyDomainSize, wellFormedProblems } from "./configuration.js";
import { VerificationError } from "./errors.js";
import { keyId as keyIdOf } from "./hpke.js";
import { deltaLimit, minUsersRequired, usersFloor } from "./policy.js";
import {
  MAX_USERS, MIN_DELTA, accountingUsers, blanketSlots, defaultDelta, honestUsers,
  messagesPerUser,
} from "./rules.js";
import { campaignMessage, endMessage, parametersMessage, verifySignature } from "./signatures.js";

/** @typedef {import("./configuration.js").Problem} Problem */
/** @typedef {import("./answers.js").View} View */
/** @typedef {import("./answers.js").KeyConfig} KeyConfig */
/** @typedef {import("./policy.js").Policy} Policy */

/**
 * The accountant's bound: delta_user of a user at privacy level `level` sending at rate
 * `lambda`, with `users` honest users' blanket at rate m over a privacy domain of
 * `domainSize` items, in blanket `mode`, for the target `delta`.
 * @typedef {(level: number, lambda: number, setSize: number, users: number, m: number,
 *   domainSize: number, options: { mode?: string, delta?: number }) => number | Promise<number>} UserDelta
 */

/**
 * How far a guarantee check is: `checked` of the campaign's `total` levels.
 * @typedef {{ checked: number, total: number }} Progress
 */

const TERMINAL = ["done", "failed", "aborted"];
const finite = (value) => typeof value === "number" && Number.isFinite(value);
/** A number as a short text for messages (six significant digits). */
const g = (value) => (finite(value) ? String(Number(value.toPrecision(6))) : String(value));

/** The names of the failed checks, each once, in order. */
function checksOf(problems) {
  return [...new Set(problems.map(([check]) => check))];
}

function refusal(prefix, problems) {
  const checks = checksOf(problems);
  return new VerificationError(`${prefix}: ${problems.map(([, text]) => text).join("; ")}`,
    { check: checks[0], checks });
}

/** The document's hash, or null when it has no canonical JSON (it then matches nothing). */
async function digest(document) {
  try {
    return await documentHash(document);
  } catch {
    return null;
  }
}

// -- round 1 ------------------------------------------------------------------------------

/**
 * What makes `config` unacceptable to an app with `policy`.
 * @param {View["config"]} config @param {Policy} policy
 * @param {{ allowInsecure?: boolean }} options @returns {Problem[]}
 */
export function configurationProblems(config, policy, { allowInsecure = false } = {}) {
  const problems = wellFormedProblems(config);
  if (problems.length) return problems;
  if (!config.padding && !policy.allowUnpadded) {
    problems.push(["padding", `padding: the campaign has no padding ids, so a user holding `
      + `fewer than s = ${config.set_size} items would send fewer non-null messages, which the `
      + "published epsilon does not account for (the app did not opt in with allowUnpadded)"]);
  }
  if (!config.fixed_size && !policy.allowVariableSize) {
    problems.push(["fixed_size", "fixed_size: submissions of the campaign carry only the sent "
      + "slots, so their number reveals the user's level to the shuffler and the network (the "
      + "app did not opt in with allowVariableSize)"]);
  }
  if (config.fake_tolerance < policy.minFakeTolerance) {
    problems.push(["fake_tolerance", `fake tolerance: the campaign tolerates a fraction `
      + `${g(config.fake_tolerance)} of fake or colluding participants, this client requires `
      + `at least ${g(policy.minFakeTolerance)}`]);
  }
  if (config.min_users < minUsersRequired(policy)) {
    problems.push(["min_users", `min_users: the campaign needs ${config.min_users} `
      + `participants, this client requires at least ${minUsersRequired(policy)}`
      + (policy.minUsers !== null ? "" : " (the shuffler's default floor; an app whose "
        + "shuffler has a lower one sets the policy's minUsers)")]);
  }
  const limit = deltaLimit(policy);
  if (config.delta !== null && config.delta > limit) {
    problems.push(["delta", `delta: the campaign's ${g(config.delta)} is above this client's `
      + `ceiling ${g(limit)}`]);
  }
  if (config.insecure_parameters !== null && !allowInsecure) {
    problems.push(["insecure_parameters", "insecure_parameters: the campaign publishes fixed, "
      + "unaccounted parameters (a test-only setting)"]);
  }
  return problems;
}

/**
 * @typedef {object} PinnedKey the verified key to seal with
 * @property {string} keyId 16 hex digits @property {Uint8Array} publicKey 32 raw bytes
 */

/**
 * The key of a key config, once its suite is the protocol's and its key id is the hash
 * of its key; an Error saying why otherwise.
 * @param {KeyConfig} hpke @returns {Promise<PinnedKey>}
 */
export async function pinnedKeyOf(hpke) {
  if (hpke.kem_id !== 0x0020 || hpke.kdf_id !== 0x0001 || hpke.aead_id !== 0x0001) {
    throw new Error("unsupported HPKE suite");
  }
  let raw;
  try {
    raw = fromBase64url(hpke.public_key);
  } catch {
    throw new Error("the public key is not canonical base64url");
  }
  if (raw.length !== 32) throw new Error("the public key is not 32 bytes");
  if ((await keyIdOf(raw)) !== hpke.key_id) throw new Error("key_id does not match the public key");
  return { keyId: hpke.key_id, publicKey: raw };
}

/**
 * Round-1 checks of a fetched view and key config; returns the key to seal with.
 * @param {View} view @param {KeyConfig} hpke @param {string} campaignId
 * @param {{ policy: Policy, allowInsecure?: boolean }} options
 * @returns {Promise<PinnedKey>}
 */
export async function verifyCampaign(view, hpke, campaignId, { policy, allowInsecure = false }) {
  if (view.id !== campaignId || view.config.id !== campaignId) {
    throw new VerificationError(`the server answered for campaign ${JSON.stringify(view.id)}, `
      + `not ${JSON.stringify(campaignId)}`, { check: "campaign" });
  }
  const hash = await digest(view.raw.config);
  if (hash !== null && hash !== view.config_hash) {
    throw new VerificationError("config_hash does not match the campaign configuration",
      { check: "config_hash" });
  }
  let pinned;
  try {
    pinned = await pinnedKeyOf(hpke);
  } catch (error) {
    throw new VerificationError(`invalid HPKE key config: ${error.message}`, { check: "key" });
  }
  if (pinned.keyId !== view.key_id || view.hpke_config.key_id !== view.key_id) {
    throw new VerificationError(`key id ${pinned.keyId} of the key config is not the campaign's `
      + `pinned key id ${view.key_id}`, { check: "key" });
  }
  if (view.hpke_config.public_key !== hpke.public_key) {
    throw new VerificationError("the key config differs from the key in the campaign view",
      { check: "key" });
  }
  const problems = configurationProblems(view.config, policy, { allowInsecure });
  if (problems.length) throw refusal("the campaign's settings are not acceptable", problems);
  if (hash === null) {
    throw new VerificationError("the campaign configuration has no canonical form",
      { check: "config_hash" });
  }
  return pinned;
}

// -- signatures ---------------------------------------------------------------------------

/**
 * With the server's document-signing key: the view's campaign statement, its end
 * statement in a terminal phase, and with `parameters` its parameters statement, must
 * carry the server's signature (docs/wire.md section 9). A relay then cannot substitute
 * a key, parameters or an ending.
 * @param {View} view @param {Uint8Array} serverKey 32 raw bytes
 * @param {{ parameters?: boolean }} options
 */
export async function verifySignatures(view, serverKey, { parameters = false } = {}) {
  /** @type {[string, () => Uint8Array][]} */
  const statements = [["campaign", () => campaignMessage(view.id,
    lowerHex(view.config_hash, 32, "config_hash"), lowerHex(view.key_id, 8, "key_id"),
    fromBase64url(view.hpke_config.public_key))]];
  if (parameters) {
    statements.push(["parameters", () => {
      if (view.parameters_hash === null) throw new Error("the view has no parameters to verify");
      return parametersMessage(view.id, lowerHex(view.parameters_hash, 32, "parameters_hash"));
    }]);
  }
  if (TERMINAL.includes(view.phase)) {
    statements.push(["end", () => endMessage(view.id, view.phase, view.end_reason)]);
  }
  for (const [name, build] of statements) {
    let message;
    try {
      message = build();
    } catch (error) {
      throw new VerificationError(`server signature (${name}): the ${name} statement cannot be `
        + `encoded: ${error.message}`, { check: "signature" });
    }
    const signature = view.signatures?.[name] ?? null;
    if (signature === null) {
      throw new VerificationError(`server signature (${name}): the view carries no ${name} `
        + "signature", { check: "signature" });
    }
    if (!(await verifySignature(serverKey, message, signature))) {
      throw new VerificationError(`server signature (${name}): the ${name} signature does not `
        + "verify under the server's document-signing key", { check: "signature" });
    }
  }
}

/** `text` if it is the lowercase hex of `bytes` bytes (the form the server signs). */
function lowerHex(text, bytes, name) {
  if (!new RegExp(`^[0-9a-f]{${2 * bytes}}$`).test(text)) {
    throw new Error(`${name} must be ${2 * bytes} lowercase hex digits`);
  }
  return text;
}

// -- round 2 ------------------------------------------------------------------------------

/** @returns {Problem[]} */
function geometryProblems(p, config, mode) {
  const domain = privacyDomainSize(config);
  let slots;
  let messages;
  try {
    if (!finite(p.m)) throw new Error("not a finite number");
    slots = blanketSlots(p.m, domain, mode);
    messages = messagesPerUser(config.set_size, p.m, domain, mode);
  } catch (error) {
    return [["m", `blanket rate (m = ${p.m}: ${error.message})`]];
  }
  /** @type {Problem[]} */
  const problems = [];
  if (p.blanket_slots !== slots) {
    problems.push(["blanket_slots", `blanket rate (${p.blanket_slots} blanket slots, m = ${g(p.m)} `
      + `gives ${slots})`]);
  }
  if (p.messages_per_user !== messages) {
    problems.push(["messages_per_user", `messages per user (${p.messages_per_user}, the `
      + `campaign's geometry gives ${messages})`]);
  }
  return problems;
}

const sameValue = (a, b) => (Array.isArray(a) && Array.isArray(b)
  ? a.length === b.length && a.every((x, i) => x === b[i])
  : a === b);

/** @returns {Problem[]} */
function repeatsConfiguration(p, config) {
  const copied = [
    ["campaign_id", p.campaign_id, config.id],
    ["levels", p.levels, config.levels],
    ["set_size", p.set_size, config.set_size],
    ["domain_size", p.domain_size, config.domain_size],
    ["privacy_domain_size", p.privacy_domain_size, privacyDomainSize(config)],
    ["padding_items", p.padding_items, paddingItems(config)],
    ["fixed_size", p.fixed_size, config.fixed_size],
    ["level_privacy", p.level_privacy, config.level_privacy],
    ["dropout_tolerance", p.dropout_tolerance, config.dropout_tolerance],
    ["fake_tolerance", p.fake_tolerance, config.fake_tolerance],
    ["blanket_mode", p.blanket_mode, config.blanket_mode],
    ["correlation_ratio", p.correlation_ratio ?? 1, config.correlation_ratio ?? 1],
  ];
  return copied.filter(([, published, configured]) => !sameValue(published, configured))
    .map(([name, published, configured]) => /** @type {Problem} */ ([name, `${name.replaceAll("_", " ")} `
      + `(${JSON.stringify(published)}, the campaign uses ${JSON.stringify(configured)})`]));
}

/** @returns {Problem[]} */
function countProblems(p, config, policy) {
  const floor = usersFloor(policy, config.min_users);
  if (!(Number.isInteger(p.users) && p.users >= floor && p.users <= MAX_USERS)) {
    return [["users", `user counts (n = ${p.users}; the campaign needs at least ${floor} `
      + "round-1 participants)"]];
  }
  /** @type {Problem[]} */
  const problems = [];
  const nMin = accountingUsers(p.users, config.dropout_tolerance);
  if (p.accounting_users !== nMin) {
    problems.push(["accounting_users", `user counts (n_min = ${p.accounting_users}, the `
      + `campaign's rule gives ${nMin})`]);
  }
  const honest = honestUsers(p.users, config.dropout_tolerance, config.fake_tolerance);
  if (p.honest_users !== honest) {
    problems.push(["honest_users", `honest users (${p.honest_users}, the campaign's rule gives `
      + `ceil((1 - ${g(config.fake_tolerance)}) ${nMin}) = ${honest})`]);
  }
  return problems;
}

/** @returns {Problem[]} */
function deltaProblems(p, config, policy) {
  if (!(finite(p.delta) && p.delta >= MIN_DELTA && p.delta < 1)) {
    return [["delta", `delta (${p.delta} is not in [${MIN_DELTA}, 1))`]];
  }
  /** @type {Problem[]} */
  const problems = [];
  const usersValid = Number.isInteger(p.users) && p.users >= 1 && p.users <= MAX_USERS;
  if (config.delta !== null || usersValid) {
    const expected = config.delta !== null ? config.delta : defaultDelta(p.users);
    if (p.delta !== expected) {
      problems.push(["delta", `delta (${g(p.delta)}, the campaign's rule gives ${g(expected)})`]);
    }
  }
  const limit = deltaLimit(policy);
  if (p.delta > limit) {
    problems.push(["delta", `delta (${g(p.delta)} is above this client's ceiling ${g(limit)})`]);
  }
  return problems;
}

/** @returns {Problem[]} */
function rateProblems(p, levels) {
  const lambdas = p.lambdas;
  if (lambdas.length !== levels || !lambdas.every((lam) => finite(lam) && lam >= 0 && lam <= 1)) {
    return [["lambdas", `Poisson rates (${JSON.stringify(lambdas)}: one per level, each in [0, 1])`]];
  }
  return [];
}

/** @returns {Problem[]} */
function reportProblems(p, config) {
  /** @type {Problem[]} */
  const problems = [];
  const levels = config.levels;
  const uppers = p.epsilons;
  if (uppers.length !== levels.length
      || !uppers.every((e, i) => finite(e) && e >= 0 && e <= levels[i])) {
    problems.push(["epsilons", `epsilons (${JSON.stringify(uppers)}: one per level, each in `
      + "[0, the level])"]);
  }
  const lowers = p.epsilons_lower;
  if (lowers.length !== levels.length
      || !lowers.every((e, i) => e === null || (finite(e) && e >= 0 && e <= levels[i]))) {
    problems.push(["epsilons_lower", `epsilon lower bounds (${JSON.stringify(lowers)}: one per `
      + "level, each absent or in [0, the level])"]);
  }
  if (p.mse_bound !== null && !(finite(p.mse_bound) && p.mse_bound >= 0)) {
    problems.push(["mse_bound", `MSE bound (${p.mse_bound} is not a finite number >= 0)`]);
  }
  return problems;
}

// A population of simulated users in one process shares one parameter set: the verdicts
// are remembered per accountant (bounded).
const verdicts = new WeakMap();
const MAX_REMEMBERED = 256;

/**
 * An accountant as a check calls it; `key` identifies it for the remembered verdicts.
 * `refute`, where there is one, is the accountant's refutingDelta (an injected userDelta
 * comes without it: every level is then checked with the upper bounds).
 * @typedef {{ key: object, call: (args: import("./accountant_runner.js").UserDeltaArgs)
 *   => number | Promise<number>, refute?: (args: import("./accountant_runner.js")
 *   .UserDeltaArgs) => Promise<number | null> }} Accountant
 */

/**
 * The accountant a check calls: the injected function, or the shared runner (off the
 * main thread in a browser).
 * @param {UserDelta | undefined} userDelta @param {AbortSignal | undefined} signal
 * @returns {Accountant}
 */
function accountantOf(userDelta, signal) {
  if (userDelta !== undefined) return { key: userDelta, call: (args) => userDelta(...args) };
  const runner = defaultRunner();
  return {
    key: runner, call: (args) => runner.userDelta(args, { signal }),
    refute: (args) => runner.refutingDelta(args, { signal }),
  };
}

/**
 * The accountant's bound for `args`; a refusal when it cannot be had, and the signal's
 * reason when the caller cancelled.
 * @template T
 * @param {(args: import("./accountant_runner.js").UserDeltaArgs) => T | Promise<T>} call
 * @param {import("./accountant_runner.js").UserDeltaArgs} args
 * @param {AbortSignal | undefined} signal @returns {Promise<T>}
 */
async function bound(call, args, signal) {
  try {
    return await call(args);
  } catch (cause) {
    signal?.throwIfAborted();
    if (cause instanceof AccountantUnavailableError) {
      // Without the accountant the guarantee cannot be checked, and round 2 is not sent
      // on anyone's word.
      throw new VerificationError("the accountant is not available, so the published "
        + `parameters cannot be checked: ${cause.message}`, { check: "accountant", cause });
    }
    throw new VerificationError(`the published parameters cannot be accounted: ${cause.message}`,
      { check: "lambdas", cause });
  }
}

/**
 * Every level whose rate fails delta_user(e_k) <= delta at its published epsilon.
 * @param {Accountant} accountant @param {object} args the published figures
 * @param {Pick<ParameterOptions, "signal" | "onProgress">} options @returns {Promise<Problem[]>}
 */
async function unprotectedLevels(accountant, args, { signal, onProgress }) {
  const { key: source, call, refute } = accountant;
  const { levels, epsilons, lambdas, setSize, delta, users, m, domainSize, mode } = args;
  const progress = (checked) => onProgress?.({ checked, total: levels.length });
  const key = JSON.stringify(args);
  let remembered = verdicts.get(source);
  if (remembered === undefined) {
    remembered = new Map();
    verdicts.set(source, remembered);
  }
  if (remembered.has(key)) {
    progress(levels.length);
    return remembered.get(key);
  }
  // Each bound is compared with delta only: the accountant may stop at the first bound that
  // certifies it (a larger value is reported only above delta, where every bound is taken).
  const options = { mode, delta, enough: delta };
  /** @type {Problem[]} */
  const failing = [];
  progress(0);
  // First, for every level, an exhibited pair of datasets whose divergence at the level
  // itself already exceeds delta (cheap): such parameters are refused whatever the upper
  // bounds say, and those are not computed.
  if (refute !== undefined) {
    for (let k = 0; k < levels.length; k += 1) {
      signal?.throwIfAborted();
      const [level, lam] = [levels[k], lambdas[k]];
      const lower = await bound(
        refute, [level, lam, setSize, users, m, domainSize, { mode, delta }], signal);
      if (lower !== null) {
        failing.push(["lambdas", `level ${g(level)} (lambda=${g(lam)}: delta_user>=${g(lower)}, `
          + "shown by an exhibited pair of datasets)"]);
      }
    }
  }
  const refuted = failing.length > 0;
  for (let k = 0; k < levels.length && !refuted; k += 1) {
    signal?.throwIfAborted();
    const [level, eps, lam] = [levels[k], epsilons[k], lambdas[k]];
    const atEps = await bound(call, [eps, lam, setSize, users, m, domainSize, options], signal);
    if (atEps > delta) {
      const atLevel = eps === level ? atEps
        : await bound(call, [level, lam, setSize, users, m, domainSize, options], signal);
      if (atLevel <= delta) {
        failing.push(["epsilons", `level ${g(level)} at its published epsilon ${g(eps)} `
          + `(lambda=${g(lam)}: delta_user=${g(atEps)}; an understated guarantee)`]);
      } else {
        failing.push(["lambdas", `level ${g(level)} (lambda=${g(lam)}: delta_user=${g(atLevel)})`]);
      }
    }
    progress(k + 1);
  }
  if (refuted) progress(levels.length);
  if (remembered.size >= MAX_REMEMBERED) remembered.delete(remembered.keys().next().value);
  remembered.set(key, failing);
  return failing;
}

/**
 * @typedef {object} ParameterOptions
 * @property {number} levelIndex this user's level
 * @property {string} keyId round 1's key id @property {string} configHash round 1's hash
 * @property {Policy} policy @property {boolean} [allowInsecure]
 * @property {UserDelta} [userDelta] the accountant (tests inject one); by default the
 *   shared runner's, in a Web Worker in a browser
 * @property {AbortSignal} [signal] cancels the guarantee check: the running computation's
 *   worker is terminated and the check rejects with the signal's reason (a DOMException
 *   named AbortError unless the app gave another), not a VerificationError
 * @property {(progress: Progress) => void} [onProgress] called as the check starts
 *   (`checked` 0) and after each level (a remembered verdict, or parameters an exhibited
 *   pair of datasets refutes: once more, all checked)
 */

/**
 * Round-2 checks for a user at `levelIndex`; returns the verified parameters.
 * @param {View} view @param {ParameterOptions} options
 * @returns {Promise<NonNullable<View["parameters"]>>}
 */
export async function verifyParameters(view, options) {
  const { levelIndex, keyId, configHash, policy, allowInsecure = false } = options;
  const p = view.parameters;
  if (p === null || view.parameters_hash === null) {
    throw new VerificationError("the round-2 parameters are not published", { check: "parameters" });
  }
  const hash = await digest(view.raw.parameters);
  if (hash !== null && hash !== view.parameters_hash) {
    throw new VerificationError("parameters_hash does not match the published parameters",
      { check: "parameters_hash" });
  }
  if (view.config_hash !== configHash || p.config_hash !== configHash) {
    throw new VerificationError("the campaign configuration changed since round 1",
      { check: "config_hash" });
  }
  if (p.key_id !== keyId || view.key_id !== keyId) {
    throw new VerificationError(`the parameters pin key id ${p.key_id}, round 1 used ${keyId}`,
      { check: "key" });
  }
  const config = view.config;
  let problems = configurationProblems(config, policy, { allowInsecure });
  if (problems.length) throw refusal("the campaign's settings are not acceptable", problems);
  const mode = config.blanket_mode;
  problems = [
    ...repeatsConfiguration(p, config),
    ...geometryProblems(p, config, mode),
    ...countProblems(p, config, policy),
    ...rateProblems(p, config.levels.length),
    ...deltaProblems(p, config, policy),
  ];
  const configInsecure = config.insecure_parameters !== null;
  if (p.insecure !== configInsecure) {
    problems.push(["insecure", `insecure (${p.insecure}: the campaign `
      + `${configInsecure ? "has" : "has no"} insecure parameters)`]);
  } else if (!p.insecure) {
    problems.push(...reportProblems(p, config));
  }
  if (problems.length) {
    throw refusal("the published parameters are inconsistent with the campaign", problems);
  }
  if (hash === null) {
    throw new VerificationError("the published parameters have no canonical form",
      { check: "parameters_hash" });
  }
  if (!(Number.isInteger(levelIndex) && levelIndex >= 0 && levelIndex < config.levels.length)) {
    throw new VerificationError(`level index ${levelIndex} is not one of the `
      + `${config.levels.length} levels`, { check: "level_index" });
  }
  if (p.insecure) {
    if (allowInsecure) return p;
    throw new VerificationError("the server published insecure (unaccounted) parameters",
      { check: "insecure" });
  }
  const failing = await unprotectedLevels(accountantOf(options.userDelta, options.signal), {
    levels: config.levels, epsilons: p.epsilons, lambdas: p.lambdas, setSize: config.set_size,
    delta: p.delta, users: p.honest_users, m: p.m, domainSize: privacyDomainSize(config), mode,
  }, options);
  if (failing.length) {
    const checks = checksOf(failing);
    throw new VerificationError(`the published parameters would not protect `
      + `${failing.map(([, text]) => text).join(", ")} at delta=${g(p.delta)} with m=${g(p.m)} `
      + `(${mode} blanket), h=${p.honest_users} honest of n_min=${p.accounting_users} `
      + `(f=${g(p.fake_tolerance)}), d=${p.privacy_domain_size}`, { check: checks[0], checks });
  }
  // Only now, with the upper bounds verified: a lower bound above one is false.
  const above = config.levels.flatMap((level, k) => {
    const lower = p.epsilons_lower[k];
    const upper = /** @type {number} */ (p.epsilons[k]); // verified above
    return lower !== null && lower > upper
      ? [`level ${g(level)} (${g(lower)} > ${g(upper)})`] : [];
  });
  if (above.length) {
    throw new VerificationError(`the published epsilon lower bounds exceed the verified upper `
      + `bounds: ${above.join(", ")}`, { check: "epsilons_lower" });
  }
  return p;
}

// -- the shuffler's counts ----------------------------------------------------------------

/**
 * The claimed round-1 n is at most what the shuffler released in round 1: the server
 * cannot have decoded more level messages than the shuffler forwarded.
 * @param {NonNullable<View["parameters"]>} parameters
 * @param {import("./answers.js").RoundStatus} status
 */
export function verifyRound1Count(parameters, status) {
  if (status.round !== 1 || status.campaign_id !== parameters.campaign_id) {
    throw new VerificationError("the round status is not round 1 of this campaign",
      { check: "round1_participants" });
  }
  if (!status.released || parameters.users > status.participants) {
    throw new VerificationError(`the parameters claim n = ${parameters.users} round-1 `
      + `participants, the shuffler released round 1 with ${status.participants}`
      + `${status.released ? "" : " (not released)"}`, { check: "round1_participants" });
  }
}

/**
 * The shuffler holds round 2 until n_min users took part (docs/protocol.md section 2).
 * @param {NonNullable<View["parameters"]>} parameters
 * @param {import("./answers.js").RoundStatus} status
 */
export function verifyReleaseThreshold(parameters, status) {
  if (status.required < parameters.accounting_users) {
    throw new VerificationError(`the shuffler would release round 2 with ${status.required} `
      + `participants, the guarantee needs ${parameters.accounting_users}`,
    { check: "release_threshold" });
  }
}

