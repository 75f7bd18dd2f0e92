// The protocol caps the accountant checks its arguments against (the server and every
// client use the same numbers).

/** Largest privacy level (user-level epsilon): beyond ~36, e^eps loses the precision the
 * divergence needs. */
export const MAX_LEVEL = 30.0;

/** Most users one campaign accounts for. */
export const MAX_USERS = 1e12;

/** Largest privacy domain (items, padding included). */
export const MAX_DOMAIN_SIZE = 1_000_000;

/** Largest set size. */
export const MAX_SET_SIZE = 64;

/** Largest blanket rate m. */
export const MAX_BLANKET_RATE = 1024.0;
