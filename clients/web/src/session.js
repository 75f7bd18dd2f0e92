// One user in one campaign, both rounds, over HTTP to the shuffler (the only service a
// client talks to: it relays the server's public documents, which the client verifies).
//
//   const session = new Session({ shufflerUrl, campaignId, serverKey });
//   await session.campaign();               // fetch and verify the configuration and key
//   await session.enroll(invitation);       // the invitation buys a one-time token
//   await session.submitLevel(levelIndex);  // round 1
//   store(session.state);                   // the app keeps this between runs
//   ...                                     // the operator releases round 1
//   const later = await Session.resume(load(), { shufflerUrl, serverKey });
//   await later.waitForPhase("round2");
//   await later.fetchParameters();          // verified for every level, or refused
//                                           // (the accountant in a Web Worker)
//   await later.submitData(items);          // round 2
//
// Nothing leaves the device before what it depends on is verified (verify.js). With the
// server's document-signing key (`serverKey`, shipped with the app) every view must carry
// the server's signatures, so a relay cannot hand the client a key or parameters of its
// own; without it the first view accepted pins the key (trust on first use, or `keyId`
// known out of band).
//
// Retries are idempotent, as the services allow: the enrollment proposes the token, so
// a retry after a lost answer gets the same token back; a submission body is sealed
// once and sent again as it is, and an already-submitted answer after an ambiguous
// failure counts as done (the earlier try arrived).

import {
  readEnrollment, readKeyConfig, readRoundStatus, readView,
} from "./answers.js";
import { fromBase64url, toBase64url } from "./bytes.js";
import { ID_PATTERN } from "./configuration.js";
import {
  CampaignEndedError, ProtocolError, UsageError, VerificationError, WaitTimeoutError,
} from "./errors.js";
import { dataSlots, reportLevel, round1Body, round2Body } from "./messages.js";
import { makePolicy, withFakeTolerance } from "./policy.js";
import { secureRandom } from "./random.js";
import { restoreState, saveState } from "./state.js";
import { Transport } from "./transport.js";
import {
  verifyCampaign, verifyParameters, verifyReleaseThreshold, verifyRound1Count, verifySignatures,
} from "./verify.js";

const PHASE_ORDER = { round1: 0, round2: 1, done: 2 };
const MAX_LISTED_NAMES = 12;

/**
 * @typedef {object} SessionOptions
 * @property {string} shufflerUrl the shuffler's base URL
 * @property {string} campaignId
 * @property {string | null} [serverKey] the server's document-signing public key
 *   (unpadded base64url of 32 bytes, from `segshuffle admin signing-key`)
 * @property {string | null} [keyId] the campaign's key id, when the app knows it
 * @property {import("./policy.js").PolicyOptions} [policy] what the app accepts
 * @property {number} [minFakeTolerance] shortcut tightening the policy's
 * @property {boolean} [allowInsecure] accept a test server's unaccounted parameters
 * @property {typeof globalThis.fetch} [fetch] @property {import("./transport.js").RetryOptions} [retry]
 * @property {(ms: number, signal?: AbortSignal) => Promise<void>} [sleep]
 * @property {() => number} [now]
 * @property {AbortSignal} [signal] cancels every request of the session and the guarantee
 *   check of fetchParameters (its worker is terminated): the pending call rejects with the
 *   signal's reason, a DOMException named AbortError unless the app gave another
 * @property {(progress: import("./verify.js").Progress) => void} [onProgress] the guarantee
 *   check's progress: `checked` of `total` levels, from 0 as it starts, after each level
 * @property {import("./random.js").Random} [random] the randomizers' source (tests)
 * @property {import("./verify.js").UserDelta} [userDelta] the accountant (tests)
 * @property {(state: import("./state.js").SavedState) => void | Promise<void>} [onStateChange]
 *   called with the new saved document whenever it changes (after the first campaign
 *   fetch, the enrollment and round 1): the moments an app should store it
 */

/** What a user sent in round 1 (for the app's records; never leaves the device). */
/** @typedef {{ levelIndex: number, reportedLevel: number }} SentRound1 */
/**
 * What a user sent in round 2: the level report and every data slot (null: a null
 * message). For tests and audits; it never leaves the device.
 * @typedef {{ levelIndex: number, reportedLevel: number, items: number[],
 *   slots: (number | null)[] }} SentRound2
 */

/** One user's protocol session (see the module comment). */
export class Session {
  #transport;
  #policy;
  #serverKey;
  #serverKeyText;
  #keyIdPin;
  #allowInsecure;
  #random;
  #userDelta;
  #onStateChange;
  #onProgress;
  #signal;
  #view = null;
  #hpkeConfig = null;
  #key = null;
  #configHash = null;
  #token = null;
  #levelIndex = null;
  #reportedLevel = null;
  #parameters = null;
  #state = null;

  /** @param {SessionOptions} options */
  constructor(options) {
    const { shufflerUrl, campaignId } = options ?? {};
    if (typeof shufflerUrl !== "string" || !/^https?:\/\//.test(shufflerUrl)) {
      throw new UsageError("shufflerUrl must be an http(s) URL");
    }
    if (typeof campaignId !== "string" || !ID_PATTERN.test(campaignId)) {
      throw new UsageError(`not a campaign id: ${JSON.stringify(campaignId)}`);
    }
    /** @readonly */
    this.campaignId = campaignId;
    this.#policy = withFakeTolerance(makePolicy(options.policy), options.minFakeTolerance ?? 0);
    this.#serverKeyText = options.serverKey ?? null;
    if (this.#serverKeyText !== null) {
      try {
        this.#serverKey = fromBase64url(this.#serverKeyText.trim());
      } catch {
        this.#serverKey = null;
      }
      if (this.#serverKey?.length !== 32) {
        throw new UsageError("serverKey must be an Ed25519 public key: 32 bytes, unpadded base64url");
      }
    }
    this.#keyIdPin = options.keyId ?? null;
    if (this.#keyIdPin !== null && !/^[0-9a-f]{16}$/.test(this.#keyIdPin)) {
      throw new UsageError("keyId must be 16 lowercase hex digits");
    }
    this.#allowInsecure = options.allowInsecure === true;
    this.#random = options.random ?? secureRandom;
    this.#userDelta = options.userDelta;
    this.#onStateChange = options.onStateChange;
    this.#onProgress = options.onProgress;
    this.#signal = options.signal;
    this.#transport = new Transport(shufflerUrl, {
      fetch: options.fetch, retry: options.retry, sleep: options.sleep, now: options.now,
    });
  }

  /**
   * A session for the user whose saved document is `state` (the object or its JSON
   * text). It keeps every pin of the saved one (key, configuration hash, level report,
   * trust settings): every view fetched later must match them. The options may only add
   * to those (a `campaignId`, `keyId` or `serverKey` given must equal the saved one; the
   * stricter fake tolerance applies). A malformed, altered or mismatched document is a
   * StateError; nothing is fetched.
   * @param {import("./state.js").SavedState | string} state
   * @param {Omit<SessionOptions, "campaignId"> & { campaignId?: string }} options
   * @returns {Promise<Session>}
   */
  static async resume(state, options) {
    const restored = await restoreState(state, {
      campaignId: options?.campaignId, keyId: options?.keyId ?? null,
      serverKey: options?.serverKey ?? null, minFakeTolerance: options?.minFakeTolerance ?? 0,
    });
    const session = new Session({
      ...options, campaignId: restored.campaignId, serverKey: restored.serverKey,
      keyId: restored.keyIdPin, minFakeTolerance: restored.minFakeTolerance,
    });
    session.#token = restored.token;
    session.#levelIndex = restored.levelIndex;
    session.#reportedLevel = restored.reportedLevel;
    session.#hpkeConfig = restored.hpkeConfig;
    session.#key = restored.key;
    session.#configHash = restored.configHash;
    session.#state = await session.#document();
    return session;
  }

  // -- what the app reads -------------------------------------------------------------

  /**
   * The saved-session document to store (plain JSON, see state.js), or null before
   * enrollment (there is nothing to resume yet). It holds the user's bearer token and
   * level: store it like a secret.
   * @returns {import("./state.js").SavedState | null}
   */
  get state() {
    return this.#state === null ? null : structuredClone(this.#state);
  }

  /** The last verified campaign view (null before the first fetch). */
  get view() {
    return this.#view;
  }

  /** The verified round-2 parameters (null before fetchParameters). */
  get parameters() {
    return this.#parameters;
  }

  /** Whether the session holds a token. */
  get enrolled() {
    return this.#token !== null;
  }

  /** The level chosen in round 1 and the level report sent (null before round 1). */
  get level() {
    return { levelIndex: this.#levelIndex, reportedLevel: this.#reportedLevel };
  }

  // -- the protocol ---------------------------------------------------------------------

  /** Fetch the campaign view and key config, verify them, pin key and configuration hash. */
  async campaign() {
    const view = await this.#fetchView();
    const hpke = readKeyConfig((await this.#get("/hpke-config", "key config")).body);
    const key = await verifyCampaign(view, hpke, this.campaignId,
      { policy: this.#policy, allowInsecure: this.#allowInsecure });
    await this.#checkSignatures(view);
    if (this.#keyIdPin !== null && key.keyId !== this.#keyIdPin) {
      throw new VerificationError(`the campaign's key ${key.keyId} is not the expected key `
        + `${this.#keyIdPin}`, { check: "key" });
    }
    if (this.#key === null) {
      this.#key = key;
      this.#hpkeConfig = view.hpke_config;
      this.#configHash = view.config_hash;
    } else if (key.keyId !== this.#key.keyId || view.config_hash !== this.#configHash) {
      throw new VerificationError("the campaign's key or configuration changed since it was "
        + "first fetched", { check: "config_hash" });
    }
    this.#checkLevel(view);
    this.#view = view;
    await this.#changed();
    return view;
  }

  /**
   * Obtain the user's one-time token with their invitation (null only for a shuffler
   * with open enrollment). The client proposes the token, so a retry after a lost answer
   * gets it back rather than invitation-used.
   * @param {string | null} [invitation] @returns {Promise<void>}
   */
  async enroll(invitation = null) {
    if (this.#token !== null) throw new UsageError("already enrolled");
    // The token is the user's credential: 32 bytes straight from the CSPRNG.
    const proposed = toBase64url(crypto.getRandomValues(new Uint8Array(32)));
    const body = invitation === null ? { token: proposed } : { invitation, token: proposed };
    const answer = await this.#transport.request(`${this.#path}/enrollments`, {
      method: "POST", json: body, what: "enrollment", signal: this.#signal,
    });
    const enrollment = readEnrollment(answer.body);
    if (enrollment.campaign_id !== this.campaignId) {
      throw new ProtocolError("enrollment: the shuffler issued a token for another campaign");
    }
    if (enrollment.token !== proposed) {
      throw new ProtocolError("enrollment: the shuffler answered another token than the one proposed");
    }
    this.#token = enrollment.token;
    await this.#changed();
  }

  /**
   * Round 1: send the level (randomized when the campaign sets level_privacy), sealed.
   * @param {number} levelIndex @returns {Promise<SentRound1>}
   */
  async submitLevel(levelIndex) {
    this.#requireToken();
    if (this.#view === null) await this.campaign();
    const reportedLevel = reportLevel(levelIndex, this.#view.config, this.#random);
    const body = await round1Body(this.#view, this.#key, reportedLevel);
    await this.#submit(1, body);
    this.#levelIndex = levelIndex;
    this.#reportedLevel = reportedLevel;
    await this.#changed();
    return { levelIndex, reportedLevel };
  }

  /**
   * The shuffler's view of a round: participants, threshold, release state.
   * @param {1 | 2} round @param {{ fresh?: boolean }} [options]
   */
  async roundStatus(round, { fresh = false } = {}) {
    const answer = await this.#get(`/rounds/${round}`, "round status", fresh);
    return readRoundStatus(answer.body);
  }

  /**
   * Fetch the round-2 parameters and verify them (every level's guarantee, and the
   * shuffler's own round-1 count and release threshold); a VerificationError refuses
   * them and nothing is sent. The accountant runs in a Web Worker in a browser: the page
   * stays responsive, `onProgress` hears of each level and `signal` cancels the check.
   * `levelIndex` is needed only by a session that did not send round 1 itself.
   * @param {number} [levelIndex]
   */
  async fetchParameters(levelIndex) {
    if (levelIndex !== undefined) this.#levelIndex = levelIndex;
    if (this.#levelIndex === null) throw new UsageError("no level chosen: submitLevel() comes first");
    if (this.#view === null) await this.campaign();
    let view = await this.#fetchView();
    if (view.parameters === null) view = await this.#fetchView(true);
    await this.#checkSignatures(view, view.parameters !== null);
    this.#checkLevel(view);
    const parameters = await verifyParameters(view, {
      levelIndex: this.#levelIndex, keyId: this.#key.keyId, configHash: this.#configHash,
      policy: this.#policy, allowInsecure: this.#allowInsecure, userDelta: this.#userDelta,
      signal: this.#signal, onProgress: this.#onProgress,
    });
    // The claimed round-1 n against the shuffler's own count, re-fetched if a cached
    // status predates the release.
    let status = await this.roundStatus(1);
    if (!status.released) status = await this.roundStatus(1, { fresh: true });
    verifyRound1Count(parameters, status);
    verifyReleaseThreshold(parameters, await this.roundStatus(2));
    this.#view = view;
    this.#parameters = parameters;
    await this.#changed();
    return parameters;
  }

  /**
   * The ids of `items`: ids (integers in [0, d)) pass through, names (for a campaign
   * that has them) become their position in the campaign's list. Anything else is a
   * UsageError naming the item.
   * @param {Iterable<number | string>} items @returns {number[]}
   */
  itemIds(items) {
    if (this.#view === null) throw new UsageError("fetch the campaign first");
    if (typeof items === "string" || items === null || typeof items?.[Symbol.iterator] !== "function") {
      throw new UsageError("items must be a collection of item ids or names (wrap a single item in a list)");
    }
    const { domain_size: d, items: names } = this.#view.config;
    const hint = names ? `, or one of its item names (${listed(names)})` : "";
    return [...items].map((item) => {
      if (typeof item === "string") {
        if (!names) {
          throw new UsageError(`item ${JSON.stringify(item)}: campaign ${this.campaignId} has no `
            + `item names; pass item ids 0..${d - 1}`);
        }
        const index = names.indexOf(item);
        if (index < 0) {
          throw new UsageError(`unknown item ${JSON.stringify(item)}: campaign ${this.campaignId} `
            + `has items ${listed(names)}`);
        }
        return index;
      }
      if (Number.isInteger(item)) {
        if (item < 0 || item >= d) {
          throw new UsageError(`item id ${item} is outside campaign ${this.campaignId}'s domain: `
            + `ids 0..${d - 1}${hint}`);
        }
        return item;
      }
      throw new UsageError(`item ${String(item)}: expected an item id (integer in 0..${d - 1})`
        + `${names ? " or an item name" : ""}`);
    });
  }

  /**
   * Round 2: randomize the item set with the verified parameters, seal, send. `items`
   * are ids or names (itemIds); anything else is a UsageError and nothing is sent.
   * @param {Iterable<number | string>} items @returns {Promise<SentRound2>}
   */
  async submitData(items) {
    this.#requireToken();
    if (this.#parameters === null) await this.fetchParameters();
    const ids = this.itemIds(items);
    const reportedLevel = this.#reportedLevel
      ?? reportLevel(this.#levelIndex, this.#view.config, this.#random);
    const { items: fitted, slots } = dataSlots(ids, this.#parameters, this.#levelIndex, this.#random);
    const body = await round2Body(this.#view, this.#key, reportedLevel, slots);
    await this.#submit(2, body);
    return { levelIndex: this.#levelIndex, reportedLevel, items: fitted, slots };
  }

  /**
   * Poll the campaign until it reaches `phase` (round2 or done). A campaign that ended
   * without results is a CampaignEndedError (only once its end is signed, with a server
   * key); running out of time a WaitTimeoutError.
   * @param {"round2" | "done"} phase
   * @param {{ timeoutMs?: number, intervalMs?: number }} [options]
   */
  async waitForPhase(phase, { timeoutMs = 60000, intervalMs = 1000 } = {}) {
    if (!(phase in PHASE_ORDER)) throw new UsageError(`phase must be round2 or done, got ${phase}`);
    const deadline = this.#transport.now() + timeoutMs;
    for (;;) {
      const view = await this.#fetchView(true);
      if (view.id !== this.campaignId) {
        throw new VerificationError(`the answer is for campaign ${JSON.stringify(view.id)}, not `
          + `${JSON.stringify(this.campaignId)}`, { check: "campaign" });
      }
      await this.#checkSignatures(view);
      if (view.phase === "failed" || view.phase === "aborted") {
        throw new CampaignEndedError(view.phase, view.end_reason);
      }
      if (PHASE_ORDER[view.phase] >= PHASE_ORDER[phase]) return view;
      if (this.#transport.now() > deadline) {
        throw new WaitTimeoutError(`campaign still in phase ${view.phase} after ${timeoutMs} ms`);
      }
      await this.#transport.sleep(intervalMs, this.#signal);
    }
  }

  // -- internals ----------------------------------------------------------------------

  get #path() {
    return `/v1/campaigns/${this.campaignId}`;
  }

  #get(suffix, what, fresh = false) {
    return this.#transport.request(this.#path + suffix, { what, fresh, signal: this.#signal });
  }

  async #fetchView(fresh = false) {
    return readView((await this.#get("", "campaign", fresh)).body);
  }

  async #submit(round, body) {
    await this.#transport.request(`${this.#path}/rounds/${round}/submissions`, {
      method: "POST", json: body, token: this.#token, submission: true,
      what: `round-${round} submission`, signal: this.#signal,
    });
  }

  async #checkSignatures(view, parameters = false) {
    if (this.#serverKey) await verifySignatures(view, this.#serverKey, { parameters });
  }

  #requireToken() {
    if (this.#token === null) throw new UsageError("not enrolled: call enroll() first");
  }

  /** A saved level must exist in the campaign it is resumed into. */
  #checkLevel(view) {
    const count = view.config.levels.length;
    for (const [name, value] of [["level index", this.#levelIndex], ["reported level", this.#reportedLevel]]) {
      if (value !== null && !(value >= 0 && value < count)) {
        throw new UsageError(`${name} ${value} is not one of the campaign's ${count} levels`);
      }
    }
  }

  async #document() {
    if (this.#token === null) return null;
    return saveState({
      campaign_id: this.campaignId, token: this.#token, level_index: this.#levelIndex,
      reported_level: this.#reportedLevel, hpke_config: this.#hpkeConfig,
      config_hash: this.#configHash, server_key: this.#serverKeyText,
      key_id_pin: this.#keyIdPin, min_fake_tolerance: this.#policy.minFakeTolerance,
    });
  }

  /** Recompute the saved document and tell the app when it changed. */
  async #changed() {
    const next = await this.#document();
    if (next === null || next.checksum === this.#state?.checksum) return;
    this.#state = next;
    if (this.#onStateChange) await this.#onStateChange(structuredClone(next));
  }
}

function listed(names) {
  const shown = names.slice(0, MAX_LISTED_NAMES).map((name) => JSON.stringify(name)).join(", ");
  return names.length > MAX_LISTED_NAMES ? `${shown}, ... ${names.length} names in all` : shown;
}

