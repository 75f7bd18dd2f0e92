// The package an app installs: one public API (Session and what it needs), nothing of the
// internals, and a package.json that publishes it with its type declarations.

import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { test } from "node:test";

import * as api from "../src/index.js";

const PACKAGE = JSON.parse(await readFile(new URL("../package.json", import.meta.url), "utf8"));

/** The public API, as API.md documents it. */
const PUBLIC = [
  "CampaignEndedError", "DEFAULT_RETRY", "DEFAULT_WAIT_BUDGET_MS", "HttpError", "NetworkError",
  "OfflineError", "ProtocolError", "RefusedError", "STATE_FORMAT", "STATE_VERSION",
  "SegshuffleError", "ServiceUnreachableError", "Session", "StateError", "SubmissionRefusedError",
  "SubmissionUnknownError", "UsageError", "VerificationError", "WIRE_PROTOCOL", "WaitTimeoutError",
  "defaultRunner", "stateJson",
];

test("the package exports Session and what it needs, and no internals", () => {
  assert.deepEqual(Object.keys(api).sort(), [...PUBLIC].sort());
  for (const internal of ["verifyViewSignatures", "verifySignatures", "verifyParameters", "seal",
    "Transport", "readView", "importPrivateKey", "saveState", "restoreState"]) {
    assert.ok(!(internal in api), internal);
  }
});

test("every error the package throws is one of the exported kinds", () => {
  for (const name of PUBLIC.filter((n) => n.endsWith("Error"))) {
    assert.ok(api[name].prototype instanceof api.SegshuffleError || name === "SegshuffleError", name);
  }
  assert.ok(api.OfflineError.prototype instanceof api.ServiceUnreachableError);
  assert.ok(api.SubmissionRefusedError.prototype instanceof api.RefusedError);
  assert.ok(api.RefusedError.prototype instanceof api.HttpError);
});

test("package.json publishes the modules with their declarations, with no dependencies", () => {
  assert.notEqual(PACKAGE.private, true);
  assert.equal(PACKAGE.type, "module");
  assert.deepEqual(PACKAGE.exports["."], { types: "./types/index.d.ts", default: "./src/index.js" });
  assert.equal(PACKAGE.types, "./types/index.d.ts");
  for (const kind of ["dependencies", "peerDependencies", "optionalDependencies", "bundleDependencies"]) {
    assert.equal(PACKAGE[kind], undefined, kind);
  }
  assert.deepEqual(PACKAGE.files, ["src/", "types/", "API.md"]);
});

test("the package's major version is the wire protocol's", () => {
  assert.equal(api.WIRE_PROTOCOL, "segshuffle/v1");
  const [, wire] = api.WIRE_PROTOCOL.match(/^segshuffle\/v(\d+)$/);
  assert.equal(PACKAGE.version.split(".")[0], wire);
  assert.match(PACKAGE.version, /^\d+\.\d+\.\d+$/);
});
