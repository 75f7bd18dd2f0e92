// A bounded memo table: the accountant evaluates the same loss distributions and
// summation windows over and over while a client checks every privacy level.

/**
 * A Map that keeps at most `limit` entries, forgetting the least recently used one.
 * @template V
 */
export class BoundedCache {
  /** @param {number} limit */
  constructor(limit) {
    this.limit = limit;
    /** @type {Map<string, V>} */
    this.map = new Map();
  }

  /**
   * The value kept under `key`, computed by `make` (and kept) when there is none.
   * @param {string} key @param {() => V} make @returns {V}
   */
  get(key, make) {
    if (this.map.has(key)) {
      const value = /** @type {V} */ (this.map.get(key));
      this.map.delete(key);
      this.map.set(key, value);
      return value;
    }
    const value = make();
    if (this.map.size >= this.limit) this.map.delete(this.map.keys().next().value);
    this.map.set(key, value);
    return value;
  }

  /** Forget every entry. */
  clear() {
    this.map.clear();
  }
}

/** A cache key of numbers and flags: JavaScript prints numbers exactly (round trip). */
export function keyOf(...parts) {
  return parts.join("|");
}

/** @type {BoundedCache<any>[]} */
const registry = [];

/**
 * A bounded cache that {@link clearAllCaches} empties.
 * @param {number} limit @returns {BoundedCache<any>}
 */
export function registeredCache(limit) {
  const cache = new BoundedCache(limit);
  registry.push(cache);
  return cache;
}

/** Forget every cached computation of the accountant (to measure cold costs). */
export function clearAllCaches() {
  for (const cache of registry) cache.clear();
}
