// @ts-check
// Reading the shuffler's answers: each body must have the shape of its document (the
// wire models of docs/wire.md and docs/architecture.md) before anything is checked
// against it; a body that does not is a ProtocolError naming the member.
//
// Only shapes are checked here (types, required members, closed vocabularies); what the
// values mean is verify.js's job, which names the failed check. Unknown members are
// ignored, as the protocol asks of clients, and the received `config` and `parameters`
// objects are kept untouched beside their normalised copies, since their hashes must be
// computed over exactly what arrived.

import { ProtocolError } from "./errors.js";

const PHASES = ["round1", "round2", "done", "failed", "aborted"];
const MODES = ["slots", "independent"];

const isObject = (value) => value !== null && typeof value === "object" && !Array.isArray(value);

/**
 * A shape: a predicate and its name for messages.
 * @typedef {[(value: any) => boolean, string]} Shape
 */

/**
 * Shape predicates, each with a name for messages.
 * @type {Record<"string" | "number" | "integer" | "boolean" | "object", Shape>}
 */
const is = {
  string: [(v) => typeof v === "string", "a string"],
  number: [(v) => typeof v === "number", "a number"],
  integer: [(v) => Number.isInteger(v), "an integer"],
  boolean: [(v) => typeof v === "boolean", "true or false"],
  object: [isObject, "an object"],
};

/** @type {(shape: Shape) => Shape} */
const nullable = ([test, name]) => [(v) => v === null || test(v), `${name} or null`];
/** @type {(shape: Shape) => Shape} */
const listOf = ([test, name]) => [(v) => Array.isArray(v) && v.every(test), `a list of ${name}s`];
/** @type {(values: readonly unknown[]) => Shape} */
const oneOf = (values) => [(v) => values.includes(v), `one of ${values.join(", ")}`];
/** @type {(pattern: RegExp, name: string) => Shape} */
const matching = (pattern, name) => [(v) => typeof v === "string" && pattern.test(v), name];

/**
 * Check `body[name]` against `shape`; a missing member takes `fallback` when one is given.
 * @returns {any} the member's value (or the fallback)
 */
function member(body, name, shape, what, fallback) {
  if (!(name in body)) {
    if (fallback !== undefined) return fallback;
    throw new ProtocolError(`${what}: the answer has no ${name}`);
  }
  const value = body[name];
  if (!shape[0](value)) throw new ProtocolError(`${what}: ${name} must be ${shape[1]}`);
  return value;
}

function requireObject(body, what) {
  if (!isObject(body)) throw new ProtocolError(`${what}: the answer is not a JSON object`);
  return body;
}

/**
 * @typedef {object} KeyConfig
 * @property {string} key_id @property {number} kem_id @property {number} kdf_id
 * @property {number} aead_id @property {string} public_key unpadded base64url, 32 bytes
 */

/** @param {unknown} body @param {string} [what] @returns {KeyConfig} */
export function readKeyConfig(body, what = "key config") {
  requireObject(body, what);
  return {
    key_id: member(body, "key_id", matching(/^[0-9a-f]{16}$/, "16 lowercase hex digits"), what),
    kem_id: member(body, "kem_id", is.integer, what, 0x0020),
    kdf_id: member(body, "kdf_id", is.integer, what, 0x0001),
    aead_id: member(body, "aead_id", is.integer, what, 0x0001),
    public_key: member(body, "public_key", matching(/^[A-Za-z0-9_-]{43}$/, "32 bytes of base64url"), what),
  };
}

function readInsecure(value, what) {
  if (value === null) return null;
  const where = `${what}: insecure_parameters`;
  requireObject(value, where);
  return { m: member(value, "m", is.number, where), lambdas: member(value, "lambdas", listOf(is.number), where) };
}

/**
 * A campaign's configuration (docs/wire.md section 6), defaults filled in.
 * @typedef {object} CampaignConfig
 * @property {string} id @property {string[] | null} items the item names, or null
 * @property {number} domain_size d, the items @property {number} set_size s
 * @property {number[]} levels the privacy levels (epsilons) a user chooses from
 * @property {number | null} delta @property {number} min_users
 * @property {number} dropout_tolerance @property {number} fake_tolerance
 * @property {number | null} level_privacy eps_p of round 1's randomized response, or null
 * @property {boolean} fixed_size @property {boolean} padding
 * @property {"slots" | "independent"} blanket_mode
 * @property {number} correlation_ratio R, the correlation between levels and items the
 * optimizer guards against (1, the default, when absent)
 * @property {{ m: number, lambdas: number[] } | null} insecure_parameters
 */

/**
 * The round-2 parameters the server publishes (docs/wire.md section 7), defaults filled
 * in. `m` is the blanket rate, `lambdas[k]` level k's Poisson rate, `epsilons[k]` the
 * guarantee the server certifies for level k at `delta` (the client checks it).
 * @typedef {object} Parameters
 * @property {string} campaign_id @property {string} key_id @property {string} config_hash
 * @property {number[]} levels @property {number} m
 * @property {"slots" | "independent"} blanket_mode @property {number} blanket_slots
 * @property {number} correlation_ratio the campaign's R (1 when absent)
 * @property {number[]} lambdas @property {number} domain_size
 * @property {number} privacy_domain_size @property {number} padding_items
 * @property {number} set_size @property {number} messages_per_user
 * @property {boolean} fixed_size @property {number | null} level_privacy
 * @property {number} delta @property {number} users @property {number} accounting_users
 * @property {number} honest_users @property {number} dropout_tolerance
 * @property {number} fake_tolerance @property {(number | null)[]} epsilons
 * @property {(number | null)[]} epsilons_lower @property {number | null} mse_bound
 * @property {boolean} insecure
 */

/**
 * The configuration with its defaults filled in.
 * @param {unknown} body @param {string} [what] @returns {CampaignConfig}
 */
export function readConfig(body, what = "campaign configuration") {
  requireObject(body, what);
  return {
    id: member(body, "id", is.string, what),
    items: member(body, "items", nullable(listOf(is.string)), what),
    domain_size: member(body, "domain_size", is.integer, what),
    set_size: member(body, "set_size", is.integer, what),
    levels: member(body, "levels", listOf(is.number), what),
    delta: member(body, "delta", nullable(is.number), what),
    min_users: member(body, "min_users", is.integer, what),
    dropout_tolerance: member(body, "dropout_tolerance", is.number, what),
    fake_tolerance: member(body, "fake_tolerance", is.number, what, 0),
    level_privacy: member(body, "level_privacy", nullable(is.number), what),
    fixed_size: member(body, "fixed_size", is.boolean, what),
    padding: member(body, "padding", is.boolean, what),
    blanket_mode: member(body, "blanket_mode", oneOf(MODES), what, "slots"),
    correlation_ratio: member(body, "correlation_ratio", is.number, what, 1),
    insecure_parameters: readInsecure(member(body, "insecure_parameters", nullable(is.object), what, null), what),
  };
}

/**
 * The published round-2 parameters with their defaults filled in.
 * @param {unknown} body @param {string} [what] @returns {Parameters}
 */
export function readParameters(body, what = "parameters") {
  requireObject(body, what);
  const text = (name) => member(body, name, is.string, what);
  const integer = (name) => member(body, name, is.integer, what);
  const number = (name) => member(body, name, is.number, what);
  return {
    campaign_id: text("campaign_id"),
    key_id: text("key_id"),
    config_hash: text("config_hash"),
    levels: member(body, "levels", listOf(is.number), what),
    m: number("m"),
    blanket_mode: member(body, "blanket_mode", oneOf(MODES), what, "slots"),
    correlation_ratio: member(body, "correlation_ratio", is.number, what, 1),
    blanket_slots: integer("blanket_slots"),
    lambdas: member(body, "lambdas", listOf(is.number), what),
    domain_size: integer("domain_size"),
    privacy_domain_size: integer("privacy_domain_size"),
    padding_items: integer("padding_items"),
    set_size: integer("set_size"),
    messages_per_user: integer("messages_per_user"),
    fixed_size: member(body, "fixed_size", is.boolean, what),
    level_privacy: member(body, "level_privacy", nullable(is.number), what),
    delta: number("delta"),
    users: integer("users"),
    accounting_users: integer("accounting_users"),
    honest_users: integer("honest_users"),
    dropout_tolerance: number("dropout_tolerance"),
    fake_tolerance: member(body, "fake_tolerance", is.number, what, 0),
    epsilons: member(body, "epsilons", listOf(nullable(is.number)), what),
    epsilons_lower: member(body, "epsilons_lower", listOf(nullable(is.number)), what),
    mse_bound: member(body, "mse_bound", nullable(is.number), what),
    insecure: member(body, "insecure", is.boolean, what, false),
  };
}

const SIGNATURE = nullable(matching(/^[A-Za-z0-9_-]{86}$/, "64 bytes of base64url"));

/**
 * @typedef {object} View A campaign view: normalised members, and in `raw` the received
 *   `config` and `parameters` objects, which the hashes are computed over.
 * @property {string} id
 * @property {"round1" | "round2" | "done" | "failed" | "aborted"} phase
 * @property {CampaignConfig} config
 * @property {string} config_hash @property {string} key_id @property {KeyConfig} hpke_config
 * @property {Parameters | null} parameters
 * @property {string | null} parameters_hash @property {string | null} end_reason
 * @property {{ campaign: string | null, parameters: string | null, end: string | null } | null} signatures
 * @property {{ config: object, parameters: object | null }} raw
 */

/** @param {unknown} body @param {string} [what] @returns {View} */
export function readView(body, what = "campaign") {
  requireObject(body, what);
  const rawConfig = member(body, "config", is.object, what);
  const rawParameters = member(body, "parameters", nullable(is.object), what, null);
  const signatures = member(body, "signatures", nullable(is.object), what, null);
  return {
    id: member(body, "id", is.string, what),
    phase: member(body, "phase", oneOf(PHASES), what),
    config: readConfig(rawConfig, `${what}: config`),
    config_hash: member(body, "config_hash", is.string, what),
    key_id: member(body, "key_id", is.string, what),
    hpke_config: readKeyConfig(member(body, "hpke_config", is.object, what), `${what}: hpke_config`),
    parameters: rawParameters === null ? null : readParameters(rawParameters, `${what}: parameters`),
    parameters_hash: member(body, "parameters_hash", nullable(is.string), what, null),
    end_reason: member(body, "end_reason", nullable(is.string), what, null),
    signatures: signatures === null ? null : {
      campaign: member(signatures, "campaign", SIGNATURE, `${what}: signatures`, null),
      parameters: member(signatures, "parameters", SIGNATURE, `${what}: signatures`, null),
      end: member(signatures, "end", SIGNATURE, `${what}: signatures`, null),
    },
    raw: { config: rawConfig, parameters: rawParameters },
  };
}

/**
 * @typedef {{ campaign_id: string, round: number, participants: number, required: number,
 *   released: boolean }} RoundStatus
 */

/** @param {unknown} body @param {string} [what] @returns {RoundStatus} */
export function readRoundStatus(body, what = "round status") {
  requireObject(body, what);
  return {
    campaign_id: member(body, "campaign_id", is.string, what),
    round: member(body, "round", is.integer, what),
    participants: member(body, "participants", is.integer, what),
    required: member(body, "required", is.integer, what),
    released: member(body, "released", is.boolean, what),
  };
}

/** @param {unknown} body @param {string} [what] @returns {{ campaign_id: string, token: string }} */
export function readEnrollment(body, what = "enrollment") {
  requireObject(body, what);
  return {
    campaign_id: member(body, "campaign_id", is.string, what),
    token: member(body, "token", is.string, what),
  };
}
