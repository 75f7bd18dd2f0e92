// @ts-check
// The wire protocol this client speaks (docs/wire.md). The package's major version is the
// protocol's: every release of major 1 speaks segshuffle/v1, and a new wire version is a
// new major version.

/** The wire protocol of the services this client talks to. */
export const WIRE_PROTOCOL = "segshuffle/v1";
