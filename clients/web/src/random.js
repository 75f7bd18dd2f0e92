// @ts-check
// Randomness for the randomizers, from the platform's CSPRNG (crypto.getRandomValues):
// uniform numbers, coins, unbiased integers and samples without replacement. Every coin
// a user flips decides what the server may learn, so none comes from Math.random, and
// integers are drawn by rejection rather than by a modulo that would favour small values.

const POOL_WORDS = 256;
const TWO_POW_32 = 2 ** 32;

/** A source of random integers and samples over a fill function (default: the CSPRNG). */
export class Random {
  /** @param {(array: Uint32Array) => Uint32Array} [fill] fills an array with random words */
  constructor(fill = (array) => crypto.getRandomValues(array)) {
    this.fill = fill;
    this.pool = new Uint32Array(POOL_WORDS);
    this.next = POOL_WORDS;
  }

  /** A uniform 32-bit unsigned integer. */
  uint32() {
    if (this.next === POOL_WORDS) {
      this.fill(this.pool);
      this.next = 0;
    }
    const word = this.pool[this.next];
    this.pool[this.next] = 0; // a drawn word is not left lying in memory
    this.next += 1;
    return word;
  }

  /** A uniform number in [0, 1) with 53 random bits. */
  uniform() {
    const high = this.uint32() >>> 5; // 27 bits
    const low = this.uint32() >>> 6; // 26 bits
    return (high * 2 ** 26 + low) / 2 ** 53;
  }

  /**
   * True with probability `p` (0 never, 1 always).
   * @param {number} p
   */
  bernoulli(p) {
    if (!(p >= 0 && p <= 1)) throw new RangeError(`a probability is in [0, 1], got ${p}`);
    return this.uniform() < p;
  }

  /**
   * A uniform integer in [0, n), for 1 <= n <= 2^32, without modulo bias.
   * @param {number} n
   */
  below(n) {
    if (!(Number.isInteger(n) && n >= 1 && n <= TWO_POW_32)) {
      throw new RangeError(`n must be an integer in [1, 2^32], got ${n}`);
    }
    // Accept only words below the largest multiple of n: each residue is then equally likely.
    const limit = TWO_POW_32 - (TWO_POW_32 % n);
    for (;;) {
      const word = this.uint32();
      if (word < limit) return word % n;
    }
  }

  /**
   * `k` distinct elements of `values` chosen uniformly (a partial Fisher-Yates shuffle).
   * @template T @param {readonly T[]} values @param {number} k @returns {T[]}
   */
  sample(values, k) {
    if (!(Number.isInteger(k) && k >= 0 && k <= values.length)) {
      throw new RangeError(`cannot draw ${k} of ${values.length} values`);
    }
    const pool = [...values];
    for (let i = 0; i < k; i += 1) {
      const j = i + this.below(pool.length - i);
      [pool[i], pool[j]] = [pool[j], pool[i]];
    }
    return pool.slice(0, k);
  }
}

/** The CSPRNG-backed source every session uses unless a test gives another. */
export const secureRandom = new Random();
