// segshuffle's client for web apps, on WebCrypto and fetch alone.
//
// The wire layer: byte strings, canonical JSON and document hashes, the 32-byte
// plaintexts sealed with HPKE, the server's document signatures. On top of it a user's
// whole session (Session): the transport with its retry budget, the verification of
// everything the server publishes (docs/protocol.md section 6), the randomizers, and
// the saved-session document an app stores between the rounds. The accountant runs in a
// Web Worker in a browser (accountant_runner.js), so a check never blocks the page.

export * from "./bytes.js";
export * from "./canonical.js";
export * from "./hpke.js";
export * from "./plaintext.js";
export * from "./signatures.js";

export {
  CampaignEndedError, HttpError, NetworkError, PROBLEM_PREFIX, ProtocolError, RetryBudgetExceeded,
  SegshuffleError, StateError, SubmissionRefusedError, SubmissionUnknownError, UsageError,
  VerificationError, WaitTimeoutError,
} from "./errors.js";
export { DEFAULT_WAIT_BUDGET_MS, Session } from "./session.js";
export { DEFAULT_RETRY, Transport, retryAfterMs } from "./transport.js";
export { deltaLimit, makePolicy, usersFloor, withFakeTolerance } from "./policy.js";
export {
  configurationProblems, pinnedKeyOf, verifyCampaign, verifyParameters, verifyReleaseThreshold,
  verifyRound1Count, verifySignatures,
} from "./verify.js";
export { AccountantRunner, AccountantUnavailableError, defaultRunner } from "./accountant_runner.js";
export { readConfig, readEnrollment, readKeyConfig, readParameters, readRoundStatus, readView } from "./answers.js";
export { ID_PATTERN, paddingItems, privacyDomainSize, wellFormedProblems } from "./configuration.js";
export {
  BlanketMode, DEFAULT_DELTA_FACTOR, DEFAULT_DROPOUT_TOLERANCE, MAX_BLANKET_RATE, MAX_DOMAIN_SIZE,
  MAX_LEVEL, MAX_LEVELS, MAX_MESSAGES_PER_USER, MAX_SET_SIZE, MAX_USERS, MIN_DELTA, MIN_LEVEL,
  accountingUsers, blanketSlots, clientDeltaCeiling, defaultDelta, honestUsers, messagesPerUser,
  slotProbability,
} from "./rules.js";
export {
  dataSlots, fitSet, fixedSizeSlots, keepProbability, randomizeLevel, reportLevel, round1Body,
  round2Body,
} from "./messages.js";
export { Random, secureRandom } from "./random.js";
export { STATE_FORMAT, STATE_VERSION, restoreState, saveState, stateJson } from "./state.js";
