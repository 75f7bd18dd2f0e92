// The accountant off the page's main thread. The guarantee check (verify.js) asks for
// delta_user level by level, and at realistic sizes one level takes seconds of CPU: on
// the main thread that would freeze the page. In a browser the runner hands each request
// to a module worker (accountant/worker.js); in Node, which has no DOM Worker, it computes
// in-process. Both answer with accountant/service.js, so the values are the same doubles.
//
// Requests run one at a time, in order, and share the worker and the accountant's caches.
// Cancelling one (its AbortSignal) rejects it with the signal's reason: a queued request
// is dropped, a running one terminates the worker (the only way to stop a computation;
// the next request starts a new worker). A worker that cannot start, fails to load its
// module or dies rejects the running request with an AccountantUnavailableError: nothing
// waits for a reply that cannot come.

import { AccountantError } from "./accountant/errors.js";
import { SegshuffleError } from "./errors.js";

/** @typedef {import("./accountant/service.js").UserDeltaArgs} UserDeltaArgs */
/** @typedef {import("./accountant/service.js").Request} Request */
/** @typedef {import("./accountant/service.js").Reply} Reply */

/**
 * What the runner uses of a Worker (the DOM's, or a test's stand-in).
 * @typedef {Pick<Worker, "postMessage" | "terminate" | "addEventListener">} WorkerLike
 */

/** @typedef {{ reply: (reply: Reply) => void, fail: (error: Error) => void }} HostHooks */

/**
 * The accountant cannot be reached: its worker could not start, did not load its module
 * or died, or the runner was closed. The guarantee check then refuses the parameters
 * (a VerificationError with check `accountant`).
 */
export class AccountantUnavailableError extends SegshuffleError {}

/** Requests answered by a module worker, started on the first one. */
class WorkerHost {
  /** @type {WorkerLike | null} */
  #worker = null;
  #create;
  #hooks;

  /** @param {() => WorkerLike} create @param {HostHooks} hooks */
  constructor(create, hooks) {
    this.#create = create;
    this.#hooks = hooks;
  }

  /** @param {Request} request */
  post(request) {
    this.#worker ??= this.#start();
    this.#worker.postMessage(request);
  }

  /** Terminate the worker, whatever it is computing. */
  stop() {
    this.#worker?.terminate();
    this.#worker = null;
  }

  #start() {
    const worker = this.#create();
    const current = () => worker === this.#worker;
    worker.addEventListener("message", (event) => {
      if (current()) this.#hooks.reply(event.data);
    });
    const failure = (what) => (event) => {
      if (!current()) return;
      this.stop();
      const detail = typeof event?.message === "string" && event.message ? `: ${event.message}` : "";
      this.#hooks.fail(new AccountantUnavailableError(`the accountant's worker ${what}${detail}`));
    };
    worker.addEventListener("error", failure("failed (it did not load or it stopped)"));
    worker.addEventListener("messageerror", failure("sent a reply that cannot be read"));
    return worker;
  }
}

/** Requests answered in this thread (Node), the accountant loaded on the first one. */
class InlineHost {
  /** @type {Promise<typeof import("./accountant/service.js")> | null} */
  #service = null;
  #generation = 0;
  #hooks;

  /** @param {HostHooks} hooks */
  constructor(hooks) {
    this.#hooks = hooks;
  }

  /** @param {Request} request */
  post(request) {
    const generation = this.#generation;
    this.#service ??= import("./accountant/service.js");
    this.#service.then((service) => {
      if (generation === this.#generation) this.#hooks.reply(service.answer(request));
    }, (cause) => {
      this.#service = null;
      if (generation !== this.#generation) return;
      this.#hooks.fail(new AccountantUnavailableError(`the accountant did not load: ${cause?.message}`,
        { cause }));
    });
  }

  /** A computation in this thread cannot be interrupted: one not yet begun is skipped. */
  stop() {
    this.#generation += 1;
  }
}

/**
 * @typedef {object} Job
 * @property {Request} request @property {AbortSignal | undefined} signal
 * @property {(value: number | null) => void} resolve @property {(error: unknown) => void} reject
 * @property {() => void} onAbort
 */

/** The accountant behind a queue, in a worker where there is one (see the module comment). */
export class AccountantRunner {
  /** @type {WorkerHost | InlineHost} */
  #host;
  /** @type {Job[]} */
  #queue = [];
  /** @type {Job | null} */
  #running = null;
  #nextId = 1;

  /**
   * @param {{ createWorker?: (() => WorkerLike) | null }} [options] how to start a worker;
   *   without one the accountant runs in this thread
   */
  constructor({ createWorker = null } = {}) {
    /** @type {HostHooks} */
    const hooks = { reply: (reply) => this.#reply(reply), fail: (error) => this.#fail(error) };
    this.#host = createWorker ? new WorkerHost(createWorker, hooks) : new InlineHost(hooks);
  }

  /**
   * The accountant's delta_user for `args` (those of accountant/index.js's userDelta). It
   * rejects with the accountant's AccountantError for arguments it refuses, with an
   * AccountantUnavailableError when the accountant cannot be reached, and with the
   * signal's reason (an AbortError unless the app gave another) once `signal` aborts.
   * @param {UserDeltaArgs} args @param {{ signal?: AbortSignal }} [options]
   * @returns {Promise<number>}
   */
  userDelta(args, { signal } = {}) {
    return /** @type {Promise<number>} */ (this.#ask(args, undefined, signal));
  }

  /**
   * The accountant's refutingDelta for `args` (userDelta's; options.delta is required): a
   * certified lower bound on delta_user above that delta, or null. Rejects as userDelta.
   * @param {UserDeltaArgs} args @param {{ signal?: AbortSignal }} [options]
   * @returns {Promise<number | null>}
   */
  refutingDelta(args, { signal } = {}) {
    return this.#ask(args, "refute", signal);
  }

  /**
   * @param {UserDeltaArgs} args @param {"refute" | undefined} kind
   * @param {AbortSignal | undefined} signal @returns {Promise<number | null>}
   */
  #ask(args, kind, signal) {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) {
        reject(signal.reason);
        return;
      }
      /** @type {Job} */
      const job = {
        request: { id: this.#nextId++, args, ...(kind ? { kind } : {}) }, signal, resolve, reject,
        onAbort: () => this.#cancel(job),
      };
      signal?.addEventListener("abort", job.onAbort, { once: true });
      this.#queue.push(job);
      this.#pump();
    });
  }

  /**
   * Stop the worker and free what it holds (the accountant's caches); the requests
   * waiting are refused. The next request starts a new worker.
   */
  close() {
    this.#host.stop();
    const jobs = [...(this.#running ? [this.#running] : []), ...this.#queue.splice(0)];
    this.#running = null;
    for (const job of jobs) {
      this.#settle(job, () => job.reject(new AccountantUnavailableError("the accountant was closed")));
    }
  }

  #pump() {
    while (this.#running === null && this.#queue.length) {
      const job = /** @type {Job} */ (this.#queue.shift());
      this.#running = job;
      try {
        this.#host.post(job.request);
      } catch (cause) { // no worker at all (a Content-Security-Policy, an unusable URL)
        this.#running = null;
        this.#settle(job, () => job.reject(new AccountantUnavailableError(
          `the accountant's worker could not start: ${cause?.message}`, { cause })));
      }
    }
  }

  /** Forget `job`'s signal, then resolve or reject it with `outcome`. */
  #settle(job, outcome) {
    job.signal?.removeEventListener("abort", job.onAbort);
    outcome();
  }

  /** @param {Reply} reply */
  #reply(reply) {
    const job = this.#running;
    if (job === null || reply?.id !== job.request.id) return; // a cancelled request's
    this.#running = null;
    this.#settle(job, () => ("error" in reply ? job.reject(errorOf(reply.error))
      : job.resolve(reply.value)));
    this.#pump();
  }

  /** @param {Error} error */
  #fail(error) {
    const job = this.#running;
    this.#running = null;
    if (job !== null) this.#settle(job, () => job.reject(error));
    this.#pump();
  }

  /** @param {Job} job */
  #cancel(job) {
    if (job === this.#running) {
      this.#host.stop();
      this.#running = null;
    } else {
      this.#queue.splice(this.#queue.indexOf(job), 1);
    }
    this.#settle(job, () => job.reject(job.signal?.reason));
    this.#pump();
  }
}

/** The error of a reply, as the accountant's class where it is one. */
function errorOf({ name, message }) {
  if (name === "AccountantError") return new AccountantError(message);
  const error = new Error(message);
  error.name = name;
  return error;
}

/** How to start the accountant's module worker, where the platform has workers. */
function moduleWorker() {
  if (typeof Worker !== "function") return null;
  return () => new Worker(new URL("./accountant/worker.js", import.meta.url), { type: "module" });
}

/** @type {AccountantRunner | null} */
let shared = null;

/**
 * The runner of this page (or process), made on first use: every guarantee check shares
 * its worker and the accountant's caches. An app may close() it to free the worker.
 * @returns {AccountantRunner}
 */
export function defaultRunner() {
  shared ??= new AccountantRunner({ createWorker: moduleWorker() });
  return shared;
}
