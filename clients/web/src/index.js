// @ts-check
// segshuffle's client for web apps, on WebCrypto and fetch alone: the package's public API.
//
// A Session is one user's part in one campaign, both rounds: it verifies everything the
// server publishes (docs/protocol.md section 6), randomizes and seals what the user
// sends, retries within a time budget and keeps a saved-session document the app stores
// between the rounds. The errors say what the app can do about a failure. Everything
// else in src/ is internal and may change within a major version.

export { Session, DEFAULT_WAIT_BUDGET_MS } from "./session.js";
export { DEFAULT_RETRY } from "./transport.js";
export {
  CampaignEndedError, HttpError, NetworkError, OfflineError, ProtocolError, RefusedError,
  SegshuffleError, ServiceUnreachableError, StateError, SubmissionRefusedError,
  SubmissionUnknownError, UsageError, VerificationError, WaitTimeoutError,
} from "./errors.js";
export { STATE_FORMAT, STATE_VERSION, stateJson } from "./state.js";
export { defaultRunner } from "./accountant_runner.js";
export { WIRE_PROTOCOL } from "./version.js";

/** @typedef {import("./session.js").SessionOptions} SessionOptions */
/** @typedef {import("./session.js").SentRound1} SentRound1 */
/** @typedef {import("./session.js").SentRound2} SentRound2 */
/** @typedef {import("./transport.js").RetryOptions} RetryOptions */
/** @typedef {import("./policy.js").PolicyOptions} PolicyOptions */
/** @typedef {import("./state.js").SavedState} SavedState */
/** @typedef {import("./verify.js").Progress} Progress */
/** @typedef {import("./answers.js").View} View */
/** @typedef {import("./answers.js").CampaignConfig} CampaignConfig */
/** @typedef {import("./answers.js").Parameters} Parameters */
/** @typedef {import("./answers.js").KeyConfig} KeyConfig */
/** @typedef {import("./answers.js").RoundStatus} RoundStatus */
/** @typedef {import("./errors.js").ProblemDocument} ProblemDocument */
