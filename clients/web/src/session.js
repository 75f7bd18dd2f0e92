// @ts-check
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
//
// Two steps are bounded by a time, the session's `waitBudgetMs` (default 120 s), because
// only time ends them:
// - fetchParameters waits while the parameters are not published yet, while the
//   shuffler's round-1 status does not say released yet (the view can say round 2 a
//   moment before the shuffler records round 1's release as acknowledged) and across
//   transient failures (5xx, 429, no answer), with backoff and Retry-After; any check
//   that fails still refuses at once (VerificationError);
// - a submission is retried, same token and same sealed body, until the answer says
//   whether it is stored: submitLevel and submitData resolve only once it is, and reject
//   with SubmissionRefusedError (certainly not stored), ServiceUnreachableError or its
//   OfflineError (no try reached the shuffler: not stored) or SubmissionUnknownError (a
//   try may have arrived and no answer could tell in time). The saved state records each round before
//   anything of it leaves (`outcome(round)`: null, "unknown", "stored"), so a session
//   resumed after a reload never sends a stored round again and sends one of unknown
//   outcome again as it was, which settles it.

import {
  readEnrollment, readKeyConfig, readRoundStatus, readView,
} from "./answers.js";
import { fromBase64url, toBase64url } from "./bytes.js";
import { ID_PATTERN } from "./configuration.js";
import {
  CampaignEndedError, ProtocolError, ServiceUnreachableError, SubmissionRefusedError, UsageError,
  VerificationError, WaitTimeoutError,
} from "./errors.js";
import { dataSlots, reportLevel, round1Body, round2Body } from "./messages.js";
import { makePolicy, withFakeTolerance } from "./policy.js";
import { secureRandom } from "./random.js";
import { restoreState, saveState } from "./state.js";
import { Transport } from "./transport.js";
import {
  verifyCampaign, verifyParameters, verifyReleaseThreshold, verifyRound1Count, verifySignatures,
} from "./verify.js";

/** @typedef {import("./answers.js").View} View */
/** @typedef {import("./answers.js").Parameters} Parameters */
/** @typedef {import("./state.js").SavedState} SavedState */
/** @typedef {"unknown" | "stored" | null} Outcome */
/** @typedef {{ items: number[], slots: (number | null)[] }} Sent2 */

/** @type {Record<string, number>} */
const PHASE_ORDER = { round1: 0, round2: 1, done: 2 };
const MAX_LISTED_NAMES = 12;

/**
 * The milliseconds a session keeps at a step that only takes time (`waitBudgetMs`): a
 * submission whose answer was lost, and the wait for the round-2 parameters. A service
 * restarted on a busy two-core host took 40 to 70 s to answer again; 120 s covers that.
 */
export const DEFAULT_WAIT_BUDGET_MS = 120000;

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
 * @property {typeof globalThis.fetch} [fetch] the fetch to use (default: the global one)
 * @property {import("./transport.js").RetryOptions} [retry] how a request retries: for
 *   `retry.budgetMs` (default 120 s) from its first try, never by a count of tries
 * @property {number} [waitBudgetMs] how long fetchParameters waits for what it needs and a
 *   submission is retried until its outcome is known (default DEFAULT_WAIT_BUDGET_MS)
 * @property {(ms: number, signal?: AbortSignal) => Promise<void>} [sleep] (tests)
 * @property {() => number} [now] (tests)
 * @property {import("./transport.js").Connectivity} [connectivity] whether the device is
 *   online and the wait for it to come back (default: the browser's `navigator.onLine` and
 *   `online` event; tests)
 * @property {AbortSignal} [signal] cancels every request of the session and the guarantee
 *   check of fetchParameters (its worker is terminated): the pending call rejects with the
 *   signal's reason, a DOMException named AbortError unless the app gave another
 * @property {(progress: import("./verify.js").Progress) => void} [onProgress] the guarantee
 *   check's progress: `checked` of `total` levels, from 0 as it starts, after each level
 * @property {import("./random.js").Random} [random] the randomizers' source (tests)
 * @property {import("./verify.js").UserDelta} [userDelta] the accountant (tests)
 * @property {(state: import("./state.js").SavedState) => void | Promise<void>} [onStateChange]
 *   called with the new saved document whenever it changes (after the first campaign
 *   fetch and the enrollment, and before and after each submission: a round is recorded
 *   as sent before anything of it leaves): the moments an app should store it. The
 *   session waits for it (a promise is awaited) before it sends.
 */

/** What a user sent in round 1 (for the app's records; never leaves the device). */
/** @typedef {{ levelIndex: number, reportedLevel: number }} SentRound1 */
/**
 * What a user sent in round 2: the level report and every data slot (null: a null
 * message). For tests and audits; it never leaves the device.
 * @typedef {{ levelIndex: number, reportedLevel: number, items: number[],
 *   slots: (number | null)[] }} SentRound2
 */

/**
 * One user's part in one campaign, both rounds, over HTTP to the shuffler. The steps, in
 * order: `campaign()` (fetch, verify and pin the configuration and key), `enroll()`,
 * `submitLevel()` (round 1), then, once the operator released round 1,
 * `fetchParameters()` (every level's guarantee checked by the accountant) and
 * `submitData()` (round 2). Nothing leaves the device before what it depends on is
 * verified. Between the rounds the app keeps `state` (given to `onStateChange` whenever
 * it changes) and carries on with `Session.resume()`. Failures are the errors of this
 * package; their kind says what the app can do.
 */
export class Session {
  #transport;
  #policy;
  /** @type {Uint8Array | null} */
  #serverKey = null;
  #serverKeyText;
  #keyIdPin;
  #allowInsecure;
  #random;
  #userDelta;
  #onStateChange;
  #onProgress;
  #signal;
  /** @type {View | null} */
  #view = null;
  /** @type {import("./answers.js").KeyConfig | null} */
  #hpkeConfig = null;
  /** @type {import("./verify.js").PinnedKey | null} */
  #key = null;
  /** @type {string | null} */
  #configHash = null;
  /** @type {string | null} */
  #token = null;
  /** @type {number | null} */
  #levelIndex = null;
  /** @type {number | null} */
  #reportedLevel = null;
  /** @type {Parameters | null} */
  #parameters = null;
  /** @type {SavedState | null} */
  #state = null;
  /** @type {number} */
  #waitBudgetMs;
  /** @type {Record<1 | 2, Outcome>} */
  #outcomes = { 1: null, 2: null };
  /** @type {{ 1: { level: string } | null, 2: { level: string, data: string[] } | null }} */
  #bodies = { 1: null, 2: null };
  /** @type {Sent2 | null} */
  #sent2 = null;
  /** @type {Record<number, { levelIndex: number | null, reportedLevel: number | null, sent2: Sent2 | null }>} */
  #before = {};

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
    this.#waitBudgetMs = options.waitBudgetMs ?? DEFAULT_WAIT_BUDGET_MS;
    if (!(Number.isFinite(this.#waitBudgetMs) && this.#waitBudgetMs >= 0)) {
      throw new UsageError("waitBudgetMs must be a number of milliseconds >= 0");
    }
    this.#random = options.random ?? secureRandom;
    this.#userDelta = options.userDelta;
    this.#onStateChange = options.onStateChange;
    this.#onProgress = options.onProgress;
    this.#signal = options.signal;
    this.#transport = new Transport(shufflerUrl, {
      fetch: options.fetch, retry: options.retry, sleep: options.sleep, now: options.now,
      connectivity: options.connectivity,
    });
  }

  /**
   * A session for the user whose saved document is `state` (the object or its JSON
   * text). It keeps every pin of the saved one (key, configuration hash, level report,
   * trust settings): every view fetched later must match them, and its record of the
   * rounds: a round it records as stored is never sent again, one of unknown outcome is
   * sent again as it was by the same submit call. The options may only add to those (a
   * `campaignId`, `keyId` or `serverKey` given must equal the saved one; the stricter
   * fake tolerance applies). A malformed, altered or mismatched document is a
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
    session.#outcomes = { ...restored.outcomes };
    session.#bodies = { ...restored.bodies };
    session.#sent2 = restored.sent2;
    session.#state = await session.#document();
    return session;
  }

  // -- what the app reads -------------------------------------------------------------

  /**
   * The saved-session document to store (plain JSON), or null before
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

  /**
   * What is known of a round's submission: null (not sent, or certainly not stored),
   * "unknown" (sent, its answer lost: the same submit call again finds out) or "stored"
   * (the shuffler holds it; it is never sent again).
   * @param {1 | 2} round @returns {"unknown" | "stored" | null}
   */
  outcome(round) {
    if (round !== 1 && round !== 2) throw new UsageError(`rounds are 1 and 2, not ${round}`);
    return this.#outcomes[round];
  }

  // -- the protocol ---------------------------------------------------------------------

  /** Fetch the campaign view and key config, verify them, pin key and configuration hash. */
  async campaign() {
    return this.#campaign();
  }

  async #campaign(deadline = undefined) {
    const view = await this.#fetchView(false, deadline);
    const hpke = readKeyConfig((await this.#get("/hpke-config", "key config", false, deadline)).body);
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
   * Round 1: send the level (randomized when the campaign sets level_privacy), sealed;
   * resolves once the shuffler holds it, else rejects with SubmissionRefusedError (not
   * stored), ServiceUnreachableError or OfflineError (not stored) or
   * SubmissionUnknownError (not known yet: call it again to find out). A round 1 the
   * session records as stored is not sent again; one of unknown outcome is sent again as
   * it was (the same level report), which settles it.
   * @param {number} levelIndex @returns {Promise<SentRound1>}
   */
  async submitLevel(levelIndex) {
    this.#requireToken();
    const known = this.#outcomes[1];
    if (known !== null && levelIndex !== this.#levelIndex) {
      throw new UsageError(`round 1 was sent with level index ${this.#levelIndex}, not ${levelIndex}`);
    }
    if (known !== "stored") {
      let body = this.#bodies[1];
      if (known === null) {
        if (this.#view === null) await this.campaign();
        const view = present(this.#view);
        const reportedLevel = reportLevel(levelIndex, view.config, this.#random);
        body = await round1Body(view, present(this.#key), reportedLevel);
        this.#begin(1, body, levelIndex, reportedLevel);
      }
      await this.#deliver(1, body, known === "unknown");
    }
    return { levelIndex: /** @type {number} */ (this.#levelIndex),
      reportedLevel: /** @type {number} */ (this.#reportedLevel) };
  }

  /**
   * The shuffler's view of a round: how many users took part, how many it needs, whether
   * it is released. An app can show it while the user waits for a round's release.
   * @param {1 | 2} round @param {{ fresh?: boolean }} options `fresh`: ask the shuffler
   *   rather than accept a cached answer
   * @returns {Promise<import("./answers.js").RoundStatus>}
   */
  async roundStatus(round, { fresh = false } = {}) {
    return this.#status(round, fresh);
  }

  /**
   * Fetch the round-2 parameters and verify them (every level's guarantee, and the
   * shuffler's own round-1 count and release threshold); a VerificationError refuses
   * them at once and nothing is sent. Waits, for at most `waitBudgetMs` (backoff between
   * tries, or a Retry-After), while the parameters are not published yet, while the
   * shuffler's round-1 status does not say released yet and across transient failures,
   * then rejects with WaitTimeoutError (`waitingFor` says which), or with
   * ServiceUnreachableError (OfflineError: the device is offline) if the shuffler gave no
   * usable answer all that time. The accountant runs once per view, in a Web Worker in a
   * browser: the page stays responsive, `onProgress` hears of each level and `signal`
   * cancels the check.
   * `levelIndex` is needed only by a session that did not send round 1 itself.
   * @param {number} [levelIndex] @returns {Promise<Parameters>}
   */
  async fetchParameters(levelIndex) {
    if (levelIndex !== undefined) this.#levelIndex = levelIndex;
    if (this.#levelIndex === null) throw new UsageError("no level chosen: submitLevel() comes first");
    const deadline = this.#transport.now() + this.#waitBudgetMs;
    let verified = null;
    for (let attempt = 0, fresh = false; ; attempt += 1, fresh = true) {
      const found = await this.#published(fresh, deadline, verified);
      if (found.parameters) {
        this.#view = found.view;
        this.#parameters = found.parameters;
        await this.#changed();
        return found.parameters;
      }
      verified = found.verified ?? verified;
      const wait = this.#transport.waitUntil(attempt, deadline);
      if (wait === null) {
        throw new WaitTimeoutError(`round-2 parameters: ${found.why} after ${this.#waitBudgetMs} ms`,
          { waitingFor: found.waitingFor });
      }
      await this.#transport.sleep(wait, this.#signal);
    }
  }

  /**
   * One look at what the round-2 check needs: `{ view, parameters }` once everything is
   * there and verified, else what is not there yet (`{ waitingFor, why }`, with the
   * verdict on the view so far); a failed check throws. A view is verified once: the
   * accountant is not run again on the same view while the loop waits.
   */
  async #published(fresh, deadline, verified) {
    if (this.#view === null) await this.#campaign(deadline); // not fetched yet, or resumed
    let view = await this.#fetchView(fresh, deadline);
    if (!fresh && view.parameters === null) view = await this.#fetchView(true, deadline);
    this.#checkCampaign(view);
    await this.#checkSignatures(view, view.parameters !== null);
    if (view.phase === "failed" || view.phase === "aborted") {
      throw new CampaignEndedError(view.phase, view.end_reason);
    }
    if (view.parameters === null) {
      return { waitingFor: "parameters", why: "the parameters are not published yet" };
    }
    this.#checkLevel(view);
    const key = `${this.#levelIndex}|${JSON.stringify(view)}`;
    const parameters = verified?.key === key ? verified.parameters : await verifyParameters(view, {
      levelIndex: present(this.#levelIndex), keyId: present(this.#key).keyId,
      configHash: present(this.#configHash),
      policy: this.#policy, allowInsecure: this.#allowInsecure, userDelta: this.#userDelta,
      signal: this.#signal, onProgress: this.#onProgress,
    });
    // The claimed round-1 n against the shuffler's own count, re-fetched if a cached
    // status predates the release. A status that does not say released yet is a wait:
    // the server may publish a moment before the shuffler records the release.
    let status = await this.#status(1, fresh, deadline);
    if (!status.released && !fresh) status = await this.#status(1, true, deadline);
    if (status.campaign_id === this.campaignId && status.round === 1 && !status.released) {
      return {
        waitingFor: "round1-release", why: "the shuffler's round-1 status does not say released yet",
        verified: { key, parameters },
      };
    }
    verifyRound1Count(parameters, status);
    verifyReleaseThreshold(parameters, await this.#status(2, false, deadline));
    return { view, parameters };
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
   * Round 2: randomize the item set with the verified parameters, seal, send; resolves
   * once the shuffler holds it, else rejects as submitLevel does. `items` are ids or names
   * (itemIds); anything else is a UsageError and nothing is sent. A round 2 the session
   * records as stored is not sent again (its record is returned); one of unknown outcome
   * is sent again as it was (`items` are not drawn again), which settles it.
   * @param {Iterable<number | string>} items @returns {Promise<SentRound2>}
   */
  async submitData(items) {
    this.#requireToken();
    const known = this.#outcomes[2];
    if (known !== "stored") {
      let body = this.#bodies[2];
      if (known === null) {
        if (this.#parameters === null) await this.fetchParameters();
        const ids = this.itemIds(items);
        const reportedLevel = this.#reportedLevel
          ?? reportLevel(present(this.#levelIndex), present(this.#view).config, this.#random);
        const { items: fitted, slots } = dataSlots(ids, present(this.#parameters),
          present(this.#levelIndex), this.#random);
        body = await round2Body(present(this.#view), present(this.#key), reportedLevel, slots);
        this.#begin(2, body, this.#levelIndex, reportedLevel, { items: fitted, slots });
      }
      await this.#deliver(2, body, known === "unknown");
    }
    const { items: fitted, slots } = present(this.#sent2);
    return {
      levelIndex: /** @type {number} */ (this.#levelIndex),
      reportedLevel: /** @type {number} */ (this.#reportedLevel), items: [...fitted], slots: [...slots],
    };
  }

  /**
   * Poll the campaign until it reaches `phase` (round2 or done). A campaign that ended
   * without results is a CampaignEndedError (only once its end is signed, with a server
   * key); running out of time a WaitTimeoutError, or ServiceUnreachableError (OfflineError)
   * if the shuffler's answers stopped until the time ran out.
   * @param {"round2" | "done"} phase
   * @param {{ timeoutMs?: number, intervalMs?: number }} options how long to wait in
   *   all (default 60000 ms) and between looks (default 1000 ms)
   */
  async waitForPhase(phase, { timeoutMs = 60000, intervalMs = 1000 } = {}) {
    if (!(phase in PHASE_ORDER)) throw new UsageError(`phase must be round2 or done, got ${phase}`);
    const deadline = this.#transport.now() + timeoutMs;
    for (;;) {
      const view = await this.#fetchView(true, deadline);
      this.#checkCampaign(view);
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

  /**
   * @param {string} suffix @param {string} what @param {boolean} [fresh]
   * @param {number} [deadline]
   */
  #get(suffix, what, fresh = false, deadline = undefined) {
    return this.#transport.request(this.#path + suffix, { what, fresh, deadline, signal: this.#signal });
  }

  /** @param {boolean} [fresh] @param {number} [deadline] */
  async #fetchView(fresh = false, deadline = undefined) {
    return readView((await this.#get("", "campaign", fresh, deadline)).body);
  }

  async #status(round, fresh = false, deadline = undefined) {
    return readRoundStatus((await this.#get(`/rounds/${round}`, "round status", fresh, deadline)).body);
  }

  #checkCampaign(view) {
    if (view.id !== this.campaignId) {
      throw new VerificationError(`the answer is for campaign ${JSON.stringify(view.id)}, not `
        + `${JSON.stringify(this.campaignId)}`, { check: "campaign" });
    }
  }

  /**
   * Record a submission about to be sent: "unknown" from now until the answer settles it,
   * with its sealed body and what it sends, so that a document saved now sends the very
   * same submission again.
   */
  /**
   * @param {1 | 2} round @param {any} body @param {number | null} levelIndex
   * @param {number | null} reportedLevel @param {Sent2 | null} [sent2]
   */
  #begin(round, body, levelIndex, reportedLevel, sent2 = null) {
    this.#before[round] = { levelIndex: this.#levelIndex, reportedLevel: this.#reportedLevel, sent2: this.#sent2 };
    this.#levelIndex = levelIndex;
    this.#reportedLevel = reportedLevel;
    if (round === 2) this.#sent2 = sent2;
    this.#outcomes[round] = "unknown";
    this.#bodies[round] = body;
  }

  /** The answer settled a round: stored, or certainly not (then as before #begin). */
  #settle(round, stored) {
    this.#bodies[round] = null;
    this.#outcomes[round] = stored ? "stored" : null;
    const before = this.#before[round];
    delete this.#before[round];
    if (stored) return;
    if (round === 2) this.#sent2 = null;
    if (before) {
      this.#levelIndex = before.levelIndex;
      this.#reportedLevel = before.reportedLevel;
      if (round === 2) this.#sent2 = before.sent2;
    }
  }

  /**
   * Send a submission recorded as begun until its outcome is known; the app is told the
   * document before anything leaves and after the answer. A rejection other than a
   * refusal (SubmissionUnknownError, the signal's abort) leaves the round "unknown".
   */
  async #deliver(round, body, maybeSent) {
    await this.#changed();
    try {
      await this.#transport.request(`${this.#path}/rounds/${round}/submissions`, {
        method: "POST", json: body, token: present(this.#token), submission: true, maybeSent,
        deadline: this.#transport.now() + this.#waitBudgetMs,
        what: `round-${round} submission`, signal: this.#signal,
      });
    } catch (error) {
      if (error instanceof SubmissionRefusedError || error instanceof ServiceUnreachableError) {
        this.#settle(round, false); // certainly not stored
        await this.#changed();
      }
      throw error;
    }
    this.#settle(round, true);
    await this.#changed();
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
      round1: this.#outcomes[1], round1_body: this.#bodies[1],
      round2: this.#outcomes[2], round2_body: this.#bodies[2],
      round2_sent: this.#sent2 === null ? null
        : { items: [...this.#sent2.items], slots: [...this.#sent2.slots] },
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

/**
 * `value`, which the order of the protocol's steps guarantees is there by now.
 * @template T @param {T | null | undefined} value @returns {T}
 */
function present(value) {
  if (value === null || value === undefined) throw new TypeError("a step's prerequisite is missing");
  return value;
}

/** @param {string[]} names */
function listed(names) {
  const shown = names.slice(0, MAX_LISTED_NAMES).map((name) => JSON.stringify(name)).join(", ");
  return names.length > MAX_LISTED_NAMES ? `${shown}, ... ${names.length} names in all` : shown;
}

