// The client's privacy accountant: userDelta, the upper bound on a user's delta at a
// privacy level that a client checks against the campaign's delta before it sends.

export { AccountantError } from "./errors.js";
export { BlanketMode } from "./blanket.js";
export { clearAllCaches as clearAccountantCaches } from "./cache.js";
export {
  ACCOUNTED_BLANKET_PER_ITEM,
  CERTIFIED_ABSOLUTE_MARGIN,
  CERTIFIED_RELATIVE_MARGIN,
  POISSON_SLACK_SHARE,
  refutingDelta,
  userDelta,
} from "./accounting.js";
