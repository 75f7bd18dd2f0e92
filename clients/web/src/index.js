// segshuffle's wire layer for web apps (docs/wire.md): the byte strings, canonical JSON
// and document hashes, the 32-byte plaintexts and their HPKE sealing, and the server's
// document signatures, on WebCrypto.

export * from "./bytes.js";
export * from "./canonical.js";
export * from "./hpke.js";
export * from "./plaintext.js";
export * from "./signatures.js";
