// @ts-check
// HTTP to the shuffler, each request bounded by a time budget.
//
// Only transient failures are retried, as the Python SDK retries them: 429 (a rate
// limit), any 5xx (a service that is not ready, a balancer whose replica died under the
// request: every request is idempotent) and requests that got no answer at all. Each
// retry waits an exponential backoff with jitter, or the answer's Retry-After where that
// is longer (a rate limit knows when a token is free again), capped. A request is bounded
// by a time, never by a count of tries: it retries until `budgetMs` has passed since its
// first try (or until its `deadline`: submissions and the waits of a session, bounded by
// the session's wait budget), the last wait shortened to end there, and then gives up
// with ServiceUnreachableError. A Retry-After longer than the time left ends it at once.
//
// While the device is offline (a browser's `navigator.onLine` is false) a failed try is
// not followed by backoff after backoff: the request waits for the browser's `online`
// event and tries again as soon as it comes, and if the budget runs out first it gives
// up with OfflineError. Under Node there is no such signal and no offline wait.
//
// Every other failure is final at once: a RefusedError carrying the service's RFC 9457
// problem document.
//
// A submission knows its outcome: it resolves once stored (an already-submitted answer
// after a try that may have arrived means an earlier try got through), and otherwise
// rejects with SubmissionRefusedError (certainly not stored), SubmissionUnknownError (a
// try may have arrived and no answer could tell), or ServiceUnreachableError (no try
// reached the shuffler).
//
// Requests carry nothing the shuffler does not need: no cookies, no referrer, no
// redirects followed (a redirect could carry the bearer token elsewhere), and only the
// Content-Type and Authorization headers the shuffler's CORS consent lists.

import {
  HttpError, NetworkError, OfflineError, ProtocolError, ServiceUnreachableError,
  SubmissionUnknownError, refusalOf,
} from "./errors.js";

/**
 * How a request retries; every field is optional in the `retry` option of a Session.
 * @typedef {object} RetryOptions
 * @property {number} [initialDelayMs] backoff before the second try (default 200)
 * @property {number} [maxDelayMs] largest backoff (default 5000)
 * @property {number} [maxRetryAfterMs] longest Retry-After honoured (default 60000)
 * @property {number} [budgetMs] how long a request keeps retrying, from its first try:
 *   the last wait ends at this time and one last try follows (default 120000). Submissions
 *   and a session's waits are bounded by its `waitBudgetMs` instead.
 * @property {number} [timeoutMs] one try's time limit, answer body included (default 30000)
 */

/**
 * The retry settings a session uses unless given others: a request that gets no usable
 * answer keeps trying for two minutes, long enough for a service restarting on a busy
 * host.
 * @type {Readonly<Required<RetryOptions>>}
 */
export const DEFAULT_RETRY = Object.freeze({
  initialDelayMs: 200,
  maxDelayMs: 5000,
  maxRetryAfterMs: 60000,
  budgetMs: 120000,
  timeoutMs: 30000,
});

/** @param {number} status */
const transient = (status) => status === 429 || status >= 500; // HttpError.transient

/** Refusals that may come after a round (or its tokens) ended with a submission stored. */
const ROUND_ENDED = new Set(["wrong-phase", "unauthorized"]);

/** Backoff exponents stop growing here (2^30 times the first delay is past any ceiling). */
const MAX_DOUBLINGS = 30;

/**
 * @typedef {object} TransportOptions
 * @property {typeof globalThis.fetch} [fetch] the fetch to use (tests inject one)
 * @property {RetryOptions} [retry]
 * @property {(ms: number, signal?: AbortSignal) => Promise<void>} [sleep]
 * @property {() => number} [now] milliseconds since the epoch (Retry-After dates use it)
 * @property {() => number} [random] uniform in [0, 1), for the jitter
 * @property {Connectivity} [connectivity] whether the device is online, and the wait for
 *   it to come back (the browser's, unless a test gives another)
 */

/**
 * What the transport knows of the device's network.
 * @typedef {object} Connectivity
 * @property {() => boolean} online false only when the device knows it is offline
 * @property {(ms: number, signal?: AbortSignal) => Promise<void>} untilOnline resolves when
 *   the device comes back online or after `ms`, whichever is first; rejects on `signal`
 */

/**
 * @typedef {object} RequestOptions
 * @property {"GET" | "POST"} [method]
 * @property {unknown} [json] the request body, sent as JSON
 * @property {string} [token] the user's bearer token
 * @property {string} [what] what the request is, for error messages
 * @property {boolean} [submission] a submission: an already-submitted answer after a try
 *   that may have arrived counts as success, and a failure says what is known of the
 *   outcome (the module comment)
 * @property {boolean} [maybeSent] a submission an earlier call may have delivered (its
 *   outcome was recorded as unknown): already-submitted means stored from the first try
 * @property {number} [deadline] retry transient failures until this time (on the
 *   transport's clock, `now()`) instead of counting tries
 * @property {boolean} [fresh] revalidate with the service instead of using a cached answer
 * @property {AbortSignal} [signal] cancels the request and its retries
 */

/**
 * @typedef {object} Answer
 * @property {number} status
 * @property {any} body the parsed JSON body (null when there is none)
 * @property {boolean} alreadySubmitted true when a submission's retry met
 *   already-submitted (the earlier try got through)
 */

/**
 * The delay a Retry-After header asks for, in milliseconds: delay-seconds or an HTTP
 * date (RFC 9110 section 10.2.3), at most `capMs`; null without a usable header.
 * @param {string | null} value @param {number} nowMs @param {number} capMs
 * @returns {number | null}
 */
export function retryAfterMs(value, nowMs, capMs) {
  if (value === null) return null;
  const text = value.trim();
  let delay;
  if (/^\d{1,10}$/.test(text)) {
    delay = Number(text) * 1000;
  } else {
    const date = Date.parse(text);
    // Only the HTTP-date forms name a weekday or a month; a bare number with a sign or a
    // fraction is malformed, not a date.
    if (Number.isNaN(date) || !/[A-Za-z]/.test(text)) return null;
    delay = Math.max(0, date - nowMs);
  }
  return Math.min(delay, capMs);
}

/**
 * Resolve after `ms`, or when `event` fires on `target` (if given); reject with the
 * signal's reason when it aborts.
 * @param {number} ms @param {AbortSignal} [signal]
 * @param {EventTarget | null} [target] @param {string} [event]
 * @returns {Promise<void>}
 */
function sleepUntil(ms, signal, target = null, event = "") {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      target?.removeEventListener(event, done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    function onAbort() {
      clearTimeout(timer);
      target?.removeEventListener(event, done);
      reject(signal?.reason);
    }
    signal?.addEventListener("abort", onAbort, { once: true });
    target?.addEventListener(event, done, { once: true });
  });
}

/** @param {number} ms @param {AbortSignal} [signal] */
const defaultSleep = (ms, signal) => sleepUntil(ms, signal);

/**
 * The browser's connectivity: `navigator.onLine`, and the `online` event of the page or
 * worker. Node has neither: it counts as always online.
 * @type {Connectivity}
 */
export const browserConnectivity = Object.freeze({
  online: () => globalThis.navigator?.onLine !== false,
  untilOnline: (ms, signal) => sleepUntil(ms, signal,
    typeof globalThis.addEventListener === "function" ? globalThis : null, "online"),
});

/** An AbortSignal that fires on `outer` or after `ms`, and a function to release it. */
function attemptSignal(outer, ms) {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(new DOMException("timed out", "TimeoutError")), ms);
  const onAbort = () => controller.abort(outer.reason);
  if (outer) {
    if (outer.aborted) controller.abort(outer.reason);
    else outer.addEventListener("abort", onAbort, { once: true });
  }
  return {
    signal: controller.signal,
    release() {
      clearTimeout(timer);
      outer?.removeEventListener("abort", onAbort);
    },
  };
}

async function readJson(response) {
  const text = await response.text();
  if (text.trim() === "") return null;
  return JSON.parse(text);
}

/** Whether a failed fetch certainly never reached the service (a refused connection). */
function neverSent(error) {
  const code = error?.cause?.code;
  return code === "ECONNREFUSED" || code === "ENOTFOUND" || code === "EAI_AGAIN";
}

/** HTTP to one base URL with the retry budget of the module comment. */
export class Transport {
  /** @param {string} baseUrl @param {TransportOptions} [options] */
  constructor(baseUrl, options = {}) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    const fetchImpl = options.fetch ?? globalThis.fetch;
    if (typeof fetchImpl !== "function") throw new TypeError("no fetch is available");
    // Called unbound: a browser's fetch refuses to run with another object as `this`.
    this.fetch = (url, init) => fetchImpl(url, init);
    /** @type {Required<RetryOptions>} */
    this.retry = { ...DEFAULT_RETRY };
    for (const [name, value] of Object.entries(options.retry ?? {})) {
      if (value !== undefined) this.retry[name] = value; // an option left undefined keeps its default
    }
    const r = this.retry;
    if ("attempts" in r) {
      throw new RangeError("retry.attempts is not an option: a request retries for a time, "
        + "retry.budgetMs");
    }
    if (!(r.initialDelayMs >= 0) || !(r.maxDelayMs >= r.initialDelayMs)
        || !(r.maxRetryAfterMs >= 0) || !(Number.isFinite(r.budgetMs) && r.budgetMs >= 0)
        || !(r.timeoutMs > 0)) {
      throw new RangeError("retry needs 0 <= initialDelayMs <= maxDelayMs, "
        + "maxRetryAfterMs >= 0, a finite budgetMs >= 0 and timeoutMs > 0");
    }
    this.sleep = options.sleep ?? defaultSleep;
    this.now = options.now ?? Date.now;
    this.random = options.random ?? Math.random;
    this.connectivity = options.connectivity ?? browserConnectivity;
  }

  /** The backoff before try `attempt + 1` (attempt counts from 0): uniform in [d/2, d]. */
  backoffMs(attempt) {
    const ceiling = Math.min(this.retry.maxDelayMs, this.retry.initialDelayMs * 2 ** attempt);
    return ceiling * (0.5 + 0.5 * this.random());
  }

  /**
   * The wait before try `attempt + 1` of a request bounded by `deadline` (on `now()`):
   * the backoff, or a longer Retry-After (`askedMs`), the last wait shortened to end at the
   * deadline; null once the deadline has passed or the service asks for longer than is left.
   * @param {number} attempt @param {number} deadline @param {number | null} [askedMs]
   * @returns {number | null}
   */
  waitUntil(attempt, deadline, askedMs = null) {
    const left = deadline - this.now();
    if (left <= 0 || (askedMs !== null && askedMs > left)) return null;
    return Math.min(Math.max(this.backoffMs(Math.min(attempt, MAX_DOUBLINGS)), askedMs ?? 0), left);
  }

  /**
   * Send one request, retrying transient failures until `budgetMs` has passed since the
   * first try (or until its `deadline`), waiting for the device to come online while it
   * is offline.
   * @param {string} path @param {RequestOptions} [options] @returns {Promise<Answer>}
   */
  async request(path, options = {}) {
    const { method = "GET", json, token, what = `${method} ${path}`, submission = false,
      maybeSent = false, fresh = false, signal } = options;
    /** @type {Record<string, string>} */
    const headers = {};
    if (json !== undefined) headers["content-type"] = "application/json";
    if (token !== undefined) headers.authorization = `Bearer ${token}`;
    /** @type {RequestInit} */
    const init = {
      method, headers, body: json === undefined ? undefined : JSON.stringify(json),
      credentials: "omit", referrerPolicy: "no-referrer", redirect: "error",
      cache: fresh ? "no-cache" : "default",
    };
    const started = this.now();
    const deadline = options.deadline ?? started + this.retry.budgetMs;
    let ambiguous = submission && maybeSent;
    /** @type {HttpError | NetworkError} */
    let lastError;
    let offline = false;
    let tries = 0;
    for (let attempt = 0; ; attempt += 1) {
      tries += 1;
      const outcome = await this.#attempt(this.baseUrl + path, init, what, signal);
      offline = false;
      if (outcome.response) {
        const { status, body, error } = outcome.response;
        if (!error) return { status, body, alreadySubmitted: false };
        if (submission && ambiguous && error.problem === "already-submitted") {
          return { status, body, alreadySubmitted: true };
        }
        if (!transient(status)) throw submission ? refusal(error, ambiguous) : refusalOf(error);
        ambiguous ||= status >= 500; // a 5xx may come after the request was taken
        lastError = error;
      } else {
        ambiguous ||= !neverSent(outcome.networkError.cause);
        lastError = outcome.networkError;
        offline = !this.connectivity.online();
      }
      if (offline) {
        // No backoff: wait for the device to come back, then try at once.
        const left = deadline - this.now();
        if (left <= 0) break;
        await this.connectivity.untilOnline(left, signal);
        if (!this.connectivity.online()) {
          if (this.now() >= deadline) break;
          continue; // woken early without being online: look again
        }
        attempt = -1; // the network is back: backoff starts afresh
        continue;
      }
      const asked = lastError instanceof HttpError ? lastError.retryAfterMs : null;
      const wait = this.waitUntil(attempt, deadline, asked);
      if (wait === null) break;
      await this.sleep(wait, signal);
    }
    const waitedMs = this.now() - started;
    if (submission && ambiguous) {
      throw new SubmissionUnknownError(`${what}: whether it is stored is not known yet (its `
        + `answer was lost and ${tries} tries over ${waitedMs} ms could not tell; submit `
        + `again, here or resumed from the saved state, to find out): ${lastError.message}`,
      { lastError });
    }
    const details = { lastError, attempts: tries, waitedMs };
    if (offline) {
      throw new OfflineError(`${what}: the device is offline, and did not come back online `
        + `within ${waitedMs} ms: ${lastError.message}`, details);
    }
    throw new ServiceUnreachableError(`${what}: no usable answer from the shuffler in `
      + `${waitedMs} ms (${tries} tries): ${lastError.message}`, details);
  }

  async #attempt(url, init, what, outer) {
    const { signal, release } = attemptSignal(outer, this.retry.timeoutMs);
    try {
      let response;
      try {
        response = await this.fetch(url, { ...init, signal });
      } catch (cause) {
        if (outer?.aborted) throw outer.reason;
        return { networkError: new NetworkError(`${what}: no answer (${describe(cause)})`, { cause }) };
      }
      const status = response.status;
      let body;
      try {
        body = await readJson(response);
      } catch (cause) {
        if (outer?.aborted) throw outer.reason;
        if (signal.aborted) {
          return { networkError: new NetworkError(`${what}: the answer did not arrive in time`, { cause }) };
        }
        if (status < 400) {
          throw new ProtocolError(`${what}: the answer is not JSON (HTTP ${status})`, { status, cause });
        }
        body = null; // an error page that is not a problem document
      }
      if (status >= 200 && status < 300) return { response: { status, body } };
      return { response: { status, body, error: this.#httpError(what, status, body, response) } };
    } finally {
      release();
    }
  }

  #httpError(what, status, body, response) {
    const document = body !== null && typeof body === "object" && !Array.isArray(body) ? body : null;
    const after = retryAfterMs(response.headers.get("retry-after"), this.now(),
      this.retry.maxRetryAfterMs);
    const error = new HttpError(`${what}: HTTP ${status}`, { status, document, retryAfterMs: after });
    let message = `${what}: HTTP ${status}`;
    if (error.problem) message += ` ${error.problem}`;
    if (error.detail) message += `: ${error.detail}`;
    error.message = message;
    return error;
  }
}

/**
 * The error of a submission's final refusal: not stored, unless a try may have arrived
 * before the round or its token ended (then not known).
 */
function refusal(error, ambiguous) {
  if (ambiguous && ROUND_ENDED.has(error.problem)) {
    return new SubmissionUnknownError(`${error.message} (whether the submission is stored is `
      + "not known: a try may have arrived before the round or its token ended)", { lastError: error });
  }
  return refusalOf(error, true);
}

function describe(cause) {
  const code = cause?.cause?.code;
  const text = cause instanceof Error ? cause.message : String(cause);
  return code ? `${text}: ${code}` : text;
}
