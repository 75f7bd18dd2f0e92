// @ts-check
// The saved-session document: what an app stores to carry a user from one run to the
// next between the rounds (the invitation cannot be used twice, and round 2 must repeat
// round 1's level report and pins).
//
// It is the document the Python SDK saves, field for field and with the same checksum,
// so a session may be saved by one client and resumed by the other:
//   format "segshuffle-client-state", version 2, campaign_id, token, level_index,
//   reported_level, hpke_config, config_hash, server_key, key_id_pin,
//   min_fake_tolerance, round1, round1_body, round2, round2_body, round2_sent, checksum.
// round1 and round2 say what is known of each round's submission: null (not sent, or
// certainly not stored), "unknown" (about to be sent or sent, its outcome not known yet)
// or "stored". A round is recorded "unknown" before anything of it leaves the device,
// with its sealed request body (round1_body, round2_body, null otherwise), which a
// resumed session sends again as it is to find the outcome out; a stored round is never
// sent again. level_index and reported_level are recorded with round 1's body;
// round2_sent ({ items, slots }: the fitted item set and each data slot's item id, null
// for a null slot) with round 2's. Version 1 documents (without the round fields) are
// read too: their round 1 is stored when they have a reported_level, and nothing is
// known of round 2.
// The checksum is SHA-256 of the other fields as Python's json.dumps writes them (sorted
// keys, no spaces, ASCII escapes, floats in repr form). It catches a damaged or edited
// document; it is not a signature. Python reads a number written without a fraction as
// an integer and then checksums it as one, so a state handed to the Python SDK travels
// as stateJson's text (0.0, not JSON.stringify's 0); this client reads either.
//
// It holds the user's bearer token and privacy level: whoever reads it can submit as the
// user and learns the level chosen. Apps store it like a secret, never in logs.

import { readKeyConfig } from "./answers.js";
import { sha256, toHex, utf8 } from "./bytes.js";
import { ID_PATTERN } from "./configuration.js";
import { ProtocolError, StateError } from "./errors.js";
import { pinnedKeyOf } from "./verify.js";

export const STATE_FORMAT = "segshuffle-client-state";
export const STATE_VERSION = 2;
const FIELDS_V1 = ["format", "version", "campaign_id", "token", "level_index", "reported_level",
  "hpke_config", "config_hash", "server_key", "key_id_pin", "min_fake_tolerance", "checksum"];
const FIELDS = [...FIELDS_V1, "round1", "round1_body", "round2", "round2_body", "round2_sent"];
const FIELDS_OF_VERSION = { 1: FIELDS_V1, 2: FIELDS };
const OUTCOMES = [null, "unknown", "stored"];
const CIPHERTEXT = /^[A-Za-z0-9_-]{1,256}$/;
const MAX_MESSAGES = 4096; // rules.js MAX_MESSAGES_PER_USER
/** Fields whose numbers are floats in the saved form (written 0.0, not 0). */
const FLOAT_FIELDS = new Set(["min_fake_tolerance"]);
const MAX_TOKEN_CHARS = 4096;

/**
 * @typedef {object} SavedState the document (plain JSON)
 * @property {string} format @property {number} version @property {string} campaign_id
 * @property {string} token @property {number | null} level_index
 * @property {number | null} reported_level
 * @property {import("./answers.js").KeyConfig | null} hpke_config
 * @property {string | null} config_hash @property {string | null} server_key
 * @property {string | null} key_id_pin @property {number} min_fake_tolerance
 * @property {"unknown" | "stored" | null} round1 @property {{ level: string } | null} round1_body
 * @property {"unknown" | "stored" | null} round2
 * @property {{ level: string, data: string[] } | null} round2_body
 * @property {{ items: number[], slots: (number | null)[] } | null} round2_sent
 * @property {string} checksum
 */

/** A double as Python's repr writes it (shortest round-trip digits, Python's layout). */
export function pythonFloat(value) {
  if (!Number.isFinite(value)) throw new StateError("saved state: holds values that are not plain JSON");
  if (value === 0) return Object.is(value, -0) ? "-0.0" : "0.0";
  const sign = value < 0 ? "-" : "";
  const [mantissa, exponentText] = Math.abs(value).toExponential().split("e");
  const digits = mantissa.replace(".", "");
  const exponent = Number(exponentText);
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) return `${sign}0.${"0".repeat(-exponent - 1)}${digits}`;
    const whole = digits.slice(0, exponent + 1).padEnd(exponent + 1, "0");
    return `${sign}${whole}.${digits.slice(exponent + 1) || "0"}`;
  }
  const head = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
  return `${sign}${head}e${exponent < 0 ? "-" : "+"}${String(Math.abs(exponent)).padStart(2, "0")}`;
}

/** A JSON value as Python's json.dumps(sort_keys=True, separators=(",", ":")) writes it. */
function pythonJson(value, float = false) {
  if (value === null || typeof value === "boolean") return JSON.stringify(value);
  if (typeof value === "number") {
    if (float) return pythonFloat(value);
    if (!Number.isSafeInteger(value)) throw new StateError("saved state: holds values that are not plain JSON");
    return String(value);
  }
  if (typeof value === "string") {
    return JSON.stringify(value).replace(/[\u007f-\uffff]/g,
      (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
  }
  if (Array.isArray(value)) return `[${value.map((v) => pythonJson(v)).join(",")}]`;
  if (typeof value === "object") {
    const names = Object.keys(value).sort();
    return `{${names.map((name) => `${pythonJson(name)}:${pythonJson(value[name],
      FLOAT_FIELDS.has(name))}`).join(",")}}`;
  }
  throw new StateError("saved state: holds values that are not plain JSON");
}

/**
 * SHA-256 (hex) of the document without its checksum.
 * @returns {Promise<string>}
 */
export async function stateChecksum(document) {
  const body = Object.fromEntries(Object.entries(document).filter(([name]) => name !== "checksum"));
  return toHex(await sha256(utf8(pythonJson(body))));
}

/**
 * The document as JSON text that every reader checksums alike: floats written as floats
 * (0.0, not 0). JSON does not tell 0 from 0.0, but the Python SDK's checksum does, so a
 * state meant for it must travel as this text rather than JSON.stringify's.
 * @param {SavedState} state @returns {string}
 */
export function stateJson(state) {
  return pythonJson(state);
}

/**
 * The document for a session's fields, checksum included.
 * @param {Omit<SavedState, "format" | "version" | "checksum">} fields
 * @returns {Promise<SavedState>}
 */
export async function saveState(fields) {
  const document = {
    format: STATE_FORMAT, version: STATE_VERSION, campaign_id: fields.campaign_id,
    token: fields.token, level_index: fields.level_index, reported_level: fields.reported_level,
    hpke_config: fields.hpke_config, config_hash: fields.config_hash,
    server_key: fields.server_key, key_id_pin: fields.key_id_pin,
    min_fake_tolerance: fields.min_fake_tolerance,
    round1: fields.round1 ?? null, round1_body: fields.round1_body ?? null,
    round2: fields.round2 ?? null, round2_body: fields.round2_body ?? null,
    round2_sent: fields.round2_sent ?? null,
  };
  return { ...document, checksum: await stateChecksum(document) };
}

/** A saved round body checked for its shape (`{ level }`, or `{ level, data }` in round 2). */
function readBody(value, round) {
  const names = round === 1 ? ["level"] : ["data", "level"];
  if (!(value !== null && typeof value === "object" && !Array.isArray(value)
        && Object.keys(value).sort().join() === names.join())) {
    throw new StateError(`saved state: round${round}_body is not a round-${round} submission`);
  }
  const texts = [value.level];
  if (round === 2) {
    if (!(Array.isArray(value.data) && value.data.length > 0 && value.data.length <= MAX_MESSAGES)) {
      throw new StateError("saved state: round2_body has no valid data list");
    }
    texts.push(...value.data);
  }
  if (!texts.every((text) => typeof text === "string" && CIPHERTEXT.test(text))) {
    throw new StateError(`saved state: round${round}_body holds a value that is not a ciphertext`);
  }
  return round === 1 ? { level: value.level } : { level: value.level, data: [...value.data] };
}

function readIds(value, name, nulls) {
  if (!(Array.isArray(value) && value.length <= MAX_MESSAGES)) {
    throw new StateError(`saved state: round2_sent ${name} must be a list`);
  }
  for (const entry of value) {
    if (entry === null && nulls) continue;
    if (!(Number.isInteger(entry) && entry >= 0 && entry < 2 ** 32)) {
      throw new StateError(`saved state: round2_sent ${name} must hold item ids`);
    }
  }
  return [...value];
}

/** The rounds' records of a saved document, checked against each other. */
function readRounds(document, levelIndex, reportedLevel) {
  /** @type {Pick<RestoredState, "outcomes" | "bodies" | "sent2">} */
  const rounds = { outcomes: { 1: null, 2: null }, bodies: { 1: null, 2: null }, sent2: null };
  for (const round of [1, 2]) {
    const outcome = document[`round${round}`];
    const body = document[`round${round}_body`];
    if (!OUTCOMES.includes(outcome)) {
      throw new StateError(`saved state: round${round} must be null, "unknown" or "stored"`);
    }
    if (outcome !== null && (levelIndex === null || reportedLevel === null)) {
      throw new StateError(`saved state: a sent round ${round} needs the level_index and reported_level`);
    }
    if ((outcome === "unknown") !== (body !== null)) {
      throw new StateError(`saved state: round${round}_body goes with an unknown outcome, and only with one`);
    }
    rounds.outcomes[round] = outcome;
    rounds.bodies[round] = body === null ? null : readBody(body, round);
  }
  const sent = document.round2_sent;
  if ((sent === null) !== (rounds.outcomes[2] === null)) {
    throw new StateError("saved state: round2_sent goes with a sent round 2, and only with one");
  }
  if (sent !== null) {
    if (!(typeof sent === "object" && !Array.isArray(sent)
          && Object.keys(sent).sort().join() === "items,slots")) {
      throw new StateError("saved state: round2_sent must have items and slots");
    }
    rounds.sent2 = { items: readIds(sent.items, "items", false), slots: readIds(sent.slots, "slots", true) };
  }
  return rounds;
}

function optionalIndex(document, field) {
  const value = document[field];
  if (value === null) return null;
  if (!(Number.isInteger(value) && value >= 0 && value < 1 << 16)) {
    throw new StateError(`saved state: ${field} must be a level index or null`);
  }
  return value;
}

function optionalText(document, field) {
  const value = document[field];
  if (value !== null && !(typeof value === "string" && value.length > 0)) {
    throw new StateError(`saved state: ${field} must be a non-empty string or null`);
  }
  return value;
}

/**
 * @typedef {object} RestoredState
 * @property {string} campaignId @property {string} token
 * @property {number | null} levelIndex @property {number | null} reportedLevel
 * @property {import("./answers.js").KeyConfig | null} hpkeConfig
 * @property {import("./verify.js").PinnedKey | null} key @property {string | null} configHash
 * @property {string | null} serverKey @property {string | null} keyIdPin
 * @property {number} minFakeTolerance
 * @property {{ 1: "unknown" | "stored" | null, 2: "unknown" | "stored" | null }} outcomes
 * @property {{ 1: { level: string } | null, 2: { level: string, data: string[] } | null }} bodies
 *   the sealed bodies of rounds of unknown outcome
 * @property {{ items: number[], slots: (number | null)[] } | null} sent2 what round 2 sent
 */

/**
 * A saved document (the object, or its JSON text) checked and restored. The options may
 * only add to what was saved: a `campaignId`, `keyId` or `serverKey` given must equal
 * the saved one; the stricter fake tolerance applies. Anything malformed, altered or at
 * odds is a StateError; nothing is fetched.
 * @param {SavedState | string} input
 * @param {{ campaignId?: string, keyId?: string | null, serverKey?: string | null,
 *   minFakeTolerance?: number }} [options]
 * @returns {Promise<RestoredState>}
 */
export async function restoreState(input, options = {}) {
  let document = input;
  if (typeof document === "string") {
    try {
      document = JSON.parse(document);
    } catch {
      throw new StateError("saved state: not a JSON document");
    }
  }
  if (document === null || typeof document !== "object" || Array.isArray(document)) {
    throw new StateError("saved state: expected a JSON object");
  }
  if (document.format !== STATE_FORMAT) throw new StateError(`saved state: not a ${STATE_FORMAT} document`);
  const fields = Number.isInteger(document.version) ? FIELDS_OF_VERSION[document.version] : undefined;
  if (fields === undefined) {
    throw new StateError(`saved state: version ${JSON.stringify(document.version)} is not `
      + `supported (this client reads versions 1 and ${STATE_VERSION})`);
  }
  const names = Object.keys(document);
  const odd = [...names.filter((n) => !fields.includes(n)), ...fields.filter((n) => !names.includes(n))];
  if (odd.length) throw new StateError(`saved state: unexpected or missing fields ${odd.sort().join(", ")}`);
  if (document.checksum !== await stateChecksum(document)) {
    throw new StateError("saved state: the checksum does not match (the document was altered or damaged)");
  }
  const campaignId = document.campaign_id;
  if (!(typeof campaignId === "string" && ID_PATTERN.test(campaignId))) {
    throw new StateError("saved state: campaign_id is not a campaign id");
  }
  if (options.campaignId !== undefined && options.campaignId !== campaignId) {
    throw new StateError(`saved state: it is for campaign ${JSON.stringify(campaignId)}, not `
      + `${JSON.stringify(options.campaignId)}`);
  }
  const token = document.token;
  if (!(typeof token === "string" && token.length > 0 && token.length <= MAX_TOKEN_CHARS
        && /^[^\s\p{C}]+$/u.test(token))) {
    throw new StateError("saved state: token must be one printable line");
  }
  const savedServerKey = optionalText(document, "server_key");
  const serverKey = options.serverKey ?? null;
  if (serverKey !== null && savedServerKey !== null && serverKey !== savedServerKey) {
    throw new StateError("saved state: it was saved with another server key");
  }
  const pin = optionalText(document, "key_id_pin");
  const keyId = options.keyId ?? null;
  if (keyId !== null && pin !== null && keyId !== pin) {
    throw new StateError(`saved state: it pins key id ${pin}, not ${keyId}`);
  }
  const tolerance = document.min_fake_tolerance;
  if (!(typeof tolerance === "number" && Number.isFinite(tolerance) && tolerance >= 0 && tolerance < 1)) {
    throw new StateError("saved state: min_fake_tolerance must be in [0, 1)");
  }
  const levelIndex = optionalIndex(document, "level_index");
  const reportedLevel = optionalIndex(document, "reported_level");
  if (reportedLevel !== null && levelIndex === null) {
    throw new StateError("saved state: a reported_level needs a level_index");
  }
  // A version-1 client recorded the level report only once round 1 was stored.
  /** @type {Pick<RestoredState, "outcomes" | "bodies" | "sent2">} */
  const rounds = document.version === 1
    ? { outcomes: { 1: reportedLevel === null ? null : "stored", 2: null }, bodies: { 1: null, 2: null }, sent2: null }
    : readRounds(document, levelIndex, reportedLevel);
  const { hpke_config: hpke, config_hash: configHash } = document;
  if ((hpke === null) !== (configHash === null)) {
    throw new StateError("saved state: hpke_config and config_hash go together");
  }
  let hpkeConfig = null;
  let key = null;
  const expectedKeyId = keyId ?? pin;
  if (hpke !== null) {
    if (!(typeof configHash === "string" && /^[0-9a-f]{64}$/.test(configHash))) {
      throw new StateError("saved state: config_hash is not a SHA-256 hex digest");
    }
    try {
      hpkeConfig = readKeyConfig(hpke, "saved state: hpke_config");
      key = await pinnedKeyOf(hpkeConfig);
    } catch (error) {
      const reason = error instanceof ProtocolError ? "not a key config" : error.message;
      throw new StateError(`saved state: hpke_config: ${reason}`);
    }
    if (expectedKeyId !== null && key.keyId !== expectedKeyId) {
      throw new StateError(`saved state: its key ${key.keyId} is not the expected key ${expectedKeyId}`);
    }
  }
  return {
    campaignId, token, levelIndex, reportedLevel, hpkeConfig, key,
    configHash: hpke === null ? null : configHash,
    serverKey: serverKey ?? savedServerKey, keyIdPin: expectedKeyId,
    minFakeTolerance: Math.max(options.minFakeTolerance ?? 0, tolerance),
    ...rounds,
  };
}
