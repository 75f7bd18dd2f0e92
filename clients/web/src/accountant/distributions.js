// Binomial and Poisson point masses and tails in double precision.
//
// Point masses follow Catherine Loader's saddle-point method ("Fast and accurate
// computation of binomial probabilities", 2000), the method behind R's dbinom/dpois:
//
//   Binomial(n, p) at 0 < k < n:
//     f(k) = exp(-(D(k, n p) + D(n - k, n q)) + e(n) - e(k) - e(n - k)) sqrt(n / (2 pi k (n - k))),
//   Poisson(mu) at k >= 1:
//     f(k) = exp(-D(k, mu) - e(k)) / sqrt(2 pi k),
//
// with q = 1 - p, e(x) = ln x! - (x + 1/2) ln x + x - ln sqrt(2 pi) the Stirling remainder
// and D(x, M) = x ln(x / M) + M - x >= 0 the deviance.  Both are small numbers computed
// without cancellation: e(x) from a table below 16 and from its asymptotic series above
// (five terms, truncation below 3e-16 of e), and D(x, M), when x is within 10% of M, from
//
//   D(x, M) = (x - M) v + 2 x sum_{j >= 1} v^(2j + 1) / (2j + 1),   v = (x - M) / (x + M),
//
// whose terms fall by v^2 <= 0.0028 each (fourteen terms are far beyond double precision).
// The masses are then within a few units in the last place near the mode, and within
// ~1e-14 relative far out in the tails (the exponent's own rounding).
//
// Binomial tails are sums of these masses, taken from the side where they are small:
//
//   Pr[X >= k] = f(k) (1 + r_k + r_k r_{k+1} + ...),   r_j = f(j + 1) / f(j),
//
// and alike downwards.  Past the mode the ratios r_j fall monotonically (for the binomial
// r_j = (n - j) p / ((j + 1) q), for the Poisson mu / (j + 1)), so once r_j < 1 everything
// after term j is at most f(j) r_j / (1 - r_j) (a geometric series): the sum stops when
// that bound is below 2^-60 of the sum.  Terms come from the ratio recurrence (a few
// roundings each) and are recomputed from the saddle-point formula every sixteen terms,
// so no term is off by more than ~16 ulp; the sum is compensated (Neumaier).  A tail
// that holds the bulk of the law is one minus the opposite tail.  The result is within
// ~1e-13 relative of the exact tail wherever that tail is below 1/2 and within ~1e-15
// absolute elsewhere (the test suite checks this against 50-digit arithmetic).  The cost
// is a few standard deviations of terms per tail.  Poisson tails (poissonTails) are
// running sums over windows widened the same way, and carry a bound on their error.

/** ln sqrt(2 pi). */
export const LOG_SQRT_2PI = 0.5 * Math.log(2.0 * Math.PI);

/** Terms of the deviance series (|v| < 1/19 where it is used: v^28 < 1e-35). */
const DEVIANCE_TERMS = 14;

/** Below this argument the Stirling remainder comes from exact factorials. */
const STIRLING_SERIES_FROM = 15;

/** ln k! for k = 0..15, from the exact factorials (all below 2^53). */
const SMALL_LOG_FACTORIALS = (() => {
  const out = new Float64Array(STIRLING_SERIES_FROM + 1);
  let factorial = 1;
  for (let k = 0; k <= STIRLING_SERIES_FROM; k += 1) {
    if (k > 0) factorial *= k;
    out[k] = Math.log(factorial);
  }
  return out;
})();

/** The asymptotic series of e(x) (x > 15). @param {number} x */
function stirlingSeries(x) {
  const inv = 1.0 / x;
  const inv2 = inv * inv;
  return inv * (1.0 / 12.0 - inv2 * (1.0 / 360.0 - inv2 * (
    1.0 / 1260.0 - inv2 * (1.0 / 1680.0 - inv2 / 1188.0))));
}

/**
 * ln k! for an integer k >= 0: exact factorials up to 15, Stirling's formula with the
 * series remainder above (within a few ulp of ln k!).
 * @param {number} k @returns {number}
 */
export function lnFactorial(k) {
  if (k <= STIRLING_SERIES_FROM) return SMALL_LOG_FACTORIALS[k];
  return ((k + 0.5) * Math.log(k) - k) + LOG_SQRT_2PI + stirlingSeries(k);
}

/**
 * e(x) = ln x! - (x + 1/2) ln x + x - ln sqrt(2 pi) for an integer x >= 0 (0 at x = 0,
 * where the masses that would need it are computed directly).
 * @param {number} x @returns {number}
 */
export function stirlingRemainder(x) {
  if (x <= 0) return 0.0;
  if (x <= STIRLING_SERIES_FROM) {
    return SMALL_LOG_FACTORIALS[x] - (x + 0.5) * Math.log(x) + x - LOG_SQRT_2PI;
  }
  return stirlingSeries(x);
}

/**
 * D(x, M) = x ln(x / M) + M - x (0 ln 0 = 0), accurate where x is close to M.
 * @param {number} x @param {number} mean @returns {number}
 */
export function deviance(x, mean) {
  if (!(Math.abs(x - mean) < 0.1 * (x + mean))) {
    return (x > 0.0 ? x * Math.log(x / mean) : 0.0) + mean - x;
  }
  const v = (x - mean) / (x + mean);
  const v2 = v * v;
  let term = 2.0 * x * v;
  let total = (x - mean) * v;
  for (let j = 1; j <= DEVIANCE_TERMS; j += 1) {
    term *= v2;
    total += term / (2 * j + 1);
  }
  return total;
}

/**
 * ln Pr[Binomial(n, p) = k] (-Infinity outside 0..n).
 * @param {number} k @param {number} n @param {number} p @returns {number}
 */
export function binomLogPmf(k, n, p) {
  const q = 1.0 - p;
  if (k === 0 && n >= 0) {
    // q^n: n log1p(-p) is accurate for every p (and 1 at n = 0, even at p = 1).
    if (n === 0) return 0.0;
    return p < 1.0 ? n * Math.log1p(-p) : -Infinity;
  }
  if (k === n && n > 0) return n * (p > 0.0 ? Math.log(p) : -Infinity);
  if (!(k > 0 && k < n && p > 0.0 && p < 1.0)) return -Infinity;
  const rest = n - k;
  const logCore = stirlingRemainder(n) - stirlingRemainder(k) - stirlingRemainder(rest)
    - deviance(k, n * p) - deviance(rest, n * q);
  return logCore + 0.5 * (Math.log(n) - Math.log(k) - Math.log(rest)) - LOG_SQRT_2PI;
}

/** Pr[Binomial(n, p) = k] (0 outside 0..n). @param {number} k @param {number} n @param {number} p */
export function binomPmf(k, n, p) {
  return Math.exp(binomLogPmf(k, n, p));
}

/** Pr[Poisson(mean) = k] (0 below 0). @param {number} k @param {number} mean */
export function poissonPmf(k, mean) {
  if (k === 0) return Math.exp(-mean);
  if (!(k > 0 && mean > 0.0)) return 0.0;
  return Math.exp(-deviance(k, mean) - stirlingRemainder(k)) / Math.sqrt(2.0 * Math.PI * k);
}

/** Terms between exact recomputations in a tail sum. */
const ANCHOR_EVERY = 16;

/** A tail sum stops once what is left is provably below this share of it. */
const NEGLIGIBLE = 2 ** -60;

/**
 * sum_{j = k, k + step, ...} f(j) up to j = last (inclusive), by the ratio recurrence
 * f(j + step) = f(j) ratio(j), for a law whose ratios fall monotonically along the way
 * once below 1 (module comment).  Compensated; 0 when f(k) underflows.
 * @param {number} k @param {number} last @param {1 | -1} step
 * @param {(j: number) => number} mass @param {(j: number) => number} ratio
 * @returns {number}
 */
function tailSum(k, last, step, mass, ratio) {
  let term = mass(k);
  if (term === 0) return 0;
  let sum = term;
  let compensation = 0;
  let j = k;
  let count = 0;
  while (j !== last) {
    const r = ratio(j);
    if (r < 1 && term * r <= NEGLIGIBLE * (1 - r) * sum) break;
    j += step;
    count += 1;
    term = count % ANCHOR_EVERY === 0 ? mass(j) : term * r;
    if (term === 0) break;
    const total = sum + term;
    compensation += sum >= term ? (sum - total) + term : (term - total) + sum;
    sum = total;
  }
  return sum + compensation;
}

/** Pr[Binomial(n, p) >= k] for k in 1..n, summed upwards from k (k above the mean). */
function binomSumUp(k, n, p) {
  const q = 1.0 - p;
  return tailSum(k, n, 1, (j) => binomPmf(j, n, p), (j) => ((n - j) * p) / ((j + 1) * q));
}

/** Pr[Binomial(n, p) <= k] for k in 0..n-1, summed downwards from k (k below the mean). */
function binomSumDown(k, n, p) {
  const q = 1.0 - p;
  return tailSum(k, 0, -1, (j) => binomPmf(j, n, p), (j) => (j * q) / ((n - j + 1) * p));
}

/**
 * Pr[Binomial(n, p) <= k]: 0 below the support, 1 from its top on.
 * @param {number} k @param {number} n @param {number} p @returns {number}
 */
export function binomCdf(k, n, p) {
  if (k < 0) return 0.0;
  if (k >= n) return 1.0;
  return k < n * p ? binomSumDown(k, n, p) : 1.0 - binomSumUp(k + 1, n, p);
}

/**
 * Pr[Binomial(n, p) > k]: 1 below the support, 0 from its top on.
 * @param {number} k @param {number} n @param {number} p @returns {number}
 */
export function binomSf(k, n, p) {
  if (k < 0) return 1.0;
  if (k >= n) return 0.0;
  return k + 1 > n * p ? binomSumUp(k + 1, n, p) : 1.0 - binomSumDown(k, n, p);
}

/**
 * Pr[Binomial(c, 1/2) >= k]: 1 for k <= 0, 0 for k > c (the regularized incomplete beta
 * I_{1/2}(k, c - k + 1) inside).
 * @param {number} c @param {number} k @returns {number}
 */
export function halfTail(c, k) {
  if (k <= 0) return 1.0;
  if (k > c) return 0.0;
  return binomSf(k - 1, c, 0.5);
}

/**
 * Both tails F(t) and S(t) = 1 - F(t) for t = lo..hi of a law with point masses `mass`,
 * CDF `cdf` and survival `sf`: one mass per point, the two ends' tails once, and
 * compensated running sums from both ends; at each t the smaller running tail is taken
 * as it is and the other is 1 minus it (so each keeps the relative accuracy of a tail).
 * @param {number} lo @param {number} hi @param {(k: number) => number} mass
 * @param {(k: number) => number} cdf @param {(k: number) => number} sf
 * @returns {{lower: Float64Array, upper: Float64Array}}
 */
function cdfOnRange(lo, hi, mass, cdf, sf) {
  const size = hi - lo + 1;
  const masses = new Float64Array(size);
  for (let i = 0; i < size; i += 1) masses[i] = mass(lo + i);
  const below = new Float64Array(size);
  let sum = cdf(lo - 1);
  let compensation = 0;
  for (let i = 0; i < size; i += 1) {
    const term = masses[i];
    const total = sum + term;
    compensation += sum >= term ? (sum - total) + term : (term - total) + sum;
    sum = total;
    below[i] = sum + compensation;
  }
  const lower = new Float64Array(size);
  const upper = new Float64Array(size);
  sum = sf(hi);
  compensation = 0;
  for (let i = size - 1; i >= 0; i -= 1) {
    const above = sum + compensation; // Pr[X > lo + i]
    lower[i] = below[i] <= above ? below[i] : 1.0 - above;
    upper[i] = below[i] <= above ? 1.0 - below[i] : above;
    const term = masses[i];
    const total = sum + term;
    compensation += sum >= term ? (sum - total) + term : (term - total) + sum;
    sum = total;
  }
  return { lower, upper };
}

/**
 * Pr[Binomial(n, p) <= t] and Pr[Binomial(n, p) > t] for t = lo..hi (0 <= lo <= hi <= n).
 * @param {number} lo @param {number} hi @param {number} n @param {number} p
 * @returns {{lower: Float64Array, upper: Float64Array}}
 */
export function binomTailsRange(lo, hi, n, p) {
  return cdfOnRange(lo, hi, (k) => binomPmf(k, n, p), (k) => binomCdf(k, n, p),
    (k) => binomSf(k, n, p));
}

/** A bound on the relative error of one Poisson mass (Loader's expansion is within
 * 1e-15 of 40-digit values), as charged in {@link poissonTails}' error bound. */
const POISSON_MASS_RTOL = 1e-14;

/** A summed Poisson tail leaves out masses whose total is below 2^-60 of its first one. */
const TAIL_CUTOFF_LOG = -60.0 * Math.log(2.0);

/** Counts farther apart than this many standard deviations are summed in separate windows. */
const WINDOW_GAP_SIGMAS = 2.0;

/**
 * ln Pr[Poisson(mean) = k] for mean > 0 (-Infinity below 0).
 * @param {number} k @param {number} mean @returns {number}
 */
export function poissonLogPmf(k, mean) {
  if (k === 0) return -mean;
  if (!(k > 0)) return -Infinity;
  return -deviance(k, mean) - stirlingRemainder(k) - 0.5 * Math.log(k) - LOG_SQRT_2PI;
}

/**
 * The first count a of the lower sum f(a) + ... + f(k) (k below the mode): below a the
 * masses fall going down by f(j - 1) / f(j) = j / mean <= r = a / mean, so together they
 * are at most f(a) r / (1 - r); a moves down (doubling the distance) until that is below
 * 2^-60 f(k), or to 0 (nothing left out).
 * @param {number} k @param {number} mean
 */
function lowerWindowStart(k, mean) {
  const top = poissonLogPmf(k, mean);
  let width = 16;
  for (;;) {
    const a = k - width;
    if (a <= 0) return 0;
    const r = a / mean;
    if (poissonLogPmf(a, mean) + Math.log(r / (1.0 - r)) <= top + TAIL_CUTOFF_LOG) return a;
    width *= 2;
  }
}

/**
 * The last count b of the upper sum f(k + 1) + ... + f(b) (k at or above the mode):
 * above b the masses fall by f(j + 1) / f(j) = mean / (j + 1) <= r = mean / (b + 1), so
 * together they are at most f(b) r / (1 - r); b moves up (doubling) until that is below
 * 2^-60 f(k + 1).
 * @param {number} k @param {number} mean
 */
function upperWindowEnd(k, mean) {
  const first = poissonLogPmf(k + 1, mean);
  let width = 16;
  for (;;) {
    const b = k + 1 + width;
    const r = mean / (b + 1.0);
    if (r < 1.0 && poissonLogPmf(b, mean) + Math.log(r / (1.0 - r)) <= first + TAIL_CUTOFF_LOG) {
      return b;
    }
    width *= 2;
  }
}

/**
 * [first, last] of each run of sorted distinct counts whose steps are at most `gap`.
 * @param {number[]} counts @param {number} gap @returns {Array<[number, number]>}
 */
function clusters(counts, gap) {
  const values = [...new Set(counts)].sort((a, b) => a - b);
  /** @type {Array<[number, number]>} */
  const out = [];
  let first = values[0];
  for (let i = 1; i < values.length; i += 1) {
    if (values[i] - values[i - 1] > gap) {
      out.push([first, values[i - 1]]);
      first = values[i];
    }
  }
  if (values.length > 0) out.push([first, values[values.length - 1]]);
  return out;
}

/**
 * @typedef {object} Tails
 * @property {Float64Array} lower Pr[X <= k] at each count asked
 * @property {Float64Array} upper Pr[X > k]
 * @property {number} rtol a bound on the relative error of both
 */

/**
 * Pr[Poisson(mean) <= k] and Pr[Poisson(mean) > k] at integer counts k, with a bound on
 * their relative error.  The tail away from the mode is summed from the point masses
 * (below the mode the lower tail from k down, above it the upper tail from k + 1 up; each
 * window widened until what it leaves out is provably below 2^-60 of its first mass,
 * counts more than two standard deviations apart in windows of their own), and the
 * other tail is 1 minus it.  A running sum of L positive terms is within (L - 1) u of the
 * exact one (u = 2^-53) and each mass within POISSON_MASS_RTOL; the complement holds at
 * least 1/e of the law (Pr[X <= floor(mean)] >= 1/e, Pr[X >= floor(mean)] >= 1/2), so
 * rtol = 4 (L u + POISSON_MASS_RTOL + 2^-60) bounds both.
 * @param {ArrayLike<number>} counts @param {number} mean @returns {Tails}
 */
export function poissonTails(counts, mean) {
  const size = counts.length;
  const lower = new Float64Array(size);
  for (let i = 0; i < size; i += 1) lower[i] = counts[i] < 0 ? 0.0 : 1.0;
  if (mean <= 0.0) return { lower, upper: lower.map((x) => 1.0 - x), rtol: 0.0 };
  const mode = Math.floor(mean);
  const gap = Math.max(64.0, WINDOW_GAP_SIGMAS * Math.sqrt(mean));
  let terms = 0;
  const below = [];
  const above = [];
  for (let i = 0; i < size; i += 1) {
    if (counts[i] >= 0 && counts[i] < mode) below.push(counts[i]);
    else if (counts[i] >= mode) above.push(counts[i]);
  }
  for (const [kMin, kMax] of below.length > 0 ? clusters(below, gap) : []) {
    const a = lowerWindowStart(kMin, mean);
    const sums = new Float64Array(kMax - a + 1);
    let sum = 0.0;
    for (let j = a; j <= kMax; j += 1) {
      sum += poissonPmf(j, mean);
      sums[j - a] = sum;
    }
    for (let i = 0; i < size; i += 1) {
      if (counts[i] >= 0 && counts[i] < mode && counts[i] >= kMin && counts[i] <= kMax) {
        lower[i] = sums[counts[i] - a];
      }
    }
    terms = Math.max(terms, sums.length);
  }
  const upper = lower.map((x) => 1.0 - x);
  for (const [kMin, kMax] of above.length > 0 ? clusters(above, gap) : []) {
    const b = upperWindowEnd(kMax, mean);
    const sums = new Float64Array(b - kMin);
    let sum = 0.0;
    for (let j = b; j > kMin; j -= 1) {
      sum += poissonPmf(j, mean);
      sums[j - kMin - 1] = sum;
    }
    for (let i = 0; i < size; i += 1) {
      if (counts[i] >= mode && counts[i] >= kMin && counts[i] <= kMax) {
        upper[i] = sums[counts[i] - kMin];
        lower[i] = 1.0 - upper[i];
      }
    }
    terms = Math.max(terms, sums.length);
  }
  return { lower, upper, rtol: 4.0 * (terms * 2 ** -53 + POISSON_MASS_RTOL + 2 ** -60) };
}

/** Pr[Poisson(mean) <= k] ({@link poissonTails}). @param {number} k @param {number} mean */
export function poissonCdf(k, mean) {
  return poissonTails([k], mean).lower[0];
}

/** Pr[Poisson(mean) > k] ({@link poissonTails}). @param {number} k @param {number} mean */
export function poissonSf(k, mean) {
  return poissonTails([k], mean).upper[0];
}

/**
 * The smallest k in -1..n with Pr[Binomial(n, p) <= k] >= q (-1 when q <= 0), by
 * bisection over the support.
 * @param {number} q @param {number} n @param {number} p @returns {number}
 */
export function binomPpf(q, n, p) {
  if (q <= 0.0) return -1;
  let lo = -1;
  let hi = n;
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2);
    if (binomCdf(mid, n, p) >= q) hi = mid;
    else lo = mid;
  }
  return hi;
}

/**
 * The smallest k in -1..n with Pr[Binomial(n, p) > k] <= q (-1 when q >= 1), by
 * bisection on the upper tail (accurate where it is small).
 * @param {number} q @param {number} n @param {number} p @returns {number}
 */
export function binomIsf(q, n, p) {
  if (q >= 1.0) return -1;
  let lo = -1;
  let hi = n;
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2);
    if (binomSf(mid, n, p) <= q) hi = mid;
    else lo = mid;
  }
  return hi;
}

/**
 * The smallest j in [0, trials] with Pr[Binomial(trials, p) > j] <= `tail`.
 * @param {number} trials @param {number} p @param {number} tail @returns {number}
 */
export function upperQuantile(trials, p, tail) {
  let lo = 0;
  let hi = trials;
  while (lo < hi) {
    const mid = Math.floor((lo + hi) / 2);
    if (binomSf(mid, trials, p) <= tail) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

/**
 * The correctly rounded sum of `values` (Shewchuk's exact partials, with the final
 * round-half-even correction), for sums whose terms may cancel.
 * @param {ArrayLike<number>} values @returns {number}
 */
export function fsum(values) {
  /** @type {number[]} */
  const partials = [];
  for (let index = 0; index < values.length; index += 1) {
    let x = values[index];
    let i = 0;
    for (let j = 0; j < partials.length; j += 1) {
      let y = partials[j];
      if (Math.abs(x) < Math.abs(y)) [x, y] = [y, x];
      const hi = x + y;
      const lo = y - (hi - x);
      if (lo !== 0) partials[i++] = lo;
      x = hi;
    }
    partials.length = i;
    partials.push(x);
  }
  let n = partials.length;
  if (n === 0) return 0;
  let hi = partials[--n];
  let lo = 0;
  while (n > 0) {
    const x = hi;
    const y = partials[--n];
    hi = x + y;
    lo = y - (hi - x);
    if (lo !== 0) break;
  }
  if (n > 0 && ((lo < 0 && partials[n - 1] < 0) || (lo > 0 && partials[n - 1] > 0))) {
    const y = lo * 2;
    const x = hi + y;
    if (y === x - hi) hi = x;
  }
  return hi;
}

/**
 * sum of `values` with Neumaier's compensation (error ~2 ulp of the sum).
 * @param {ArrayLike<number>} values @param {number} [start] @param {number} [end]
 * @returns {number}
 */
export function compensatedSum(values, start = 0, end = values.length) {
  let sum = 0;
  let compensation = 0;
  for (let i = start; i < end; i += 1) {
    const term = values[i];
    const total = sum + term;
    compensation += Math.abs(sum) >= Math.abs(term) ? (sum - total) + term : (term - total) + sum;
    sum = total;
  }
  return sum + compensation;
}
