// The document signatures against the test vector of docs/wire.md section 9.

import assert from "node:assert/strict";
import { test } from "node:test";

import { fromBase64url, toHex } from "../src/bytes.js";
import {
  campaignMessage, endMessage, parametersMessage, verifySignature,
} from "../src/signatures.js";

// docs/wire.md section 9: the key's seed is 00 01 .. 1f.
const SERVER_KEY = fromBase64url("A6EHv_POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg");
const HPKE_KEY = Uint8Array.from({ length: 32 }, (_, i) => 0x20 + i);
const CAMPAIGN = ["campaign-1", "11".repeat(32), "0123456789abcdef", HPKE_KEY];
const SIGNATURES = {
  campaign: "c27pk7isMj62USH1LJ01ogBRDfOFj6IMYMXiozicuvW1GCeS-YJwntGegiKL6vsEDltF_UwzPSJBU2JwJOXXAQ",
  parameters: "0gCl2tHnH7cxXvHMU53gIY7jozim_ObN0Sg2XV4cdmG6H1bdFvvopIiqXzd3E4ojZchNlwXYQDqu7dMfNzEdAg",
  end: "i8yUEvPZB4NMR-c7k4R9pgsk9WIlgXZoPYNoWjg13rSOgl2_V8lxU_-kh7ownnNPxeaMt9ytsm9eKaCeGUVLBw",
};

test("the signed messages and signatures of the wire.md vector", async () => {
  const campaign = campaignMessage(...CAMPAIGN);
  assert.equal(toHex(campaign),
    "73656773687566666c652f76312f63616d706169676e2d646f63756d656e7400000a"
    + "63616d706169676e2d310020111111111111111111111111111111111111111111"
    + "111111111111111111111100080123456789abcdef0020202122232425262728292a"
    + "2b2c2d2e2f303132333435363738393a3b3c3d3e3f");
  const parameters = parametersMessage("campaign-1", "22".repeat(32));
  assert.equal(toHex(parameters),
    "73656773687566666c652f76312f706172616d65746572732d646f63756d656e74"
    + "00000a63616d706169676e2d31002022222222222222222222222222222222222222"
    + "22222222222222222222222222");
  const end = endMessage("campaign-1", "aborted", "aborted by the administrator");
  assert.equal(toHex(end),
    "73656773687566666c652f76312f63616d706169676e2d656e6400000a63616d70"
    + "6169676e2d31000761626f7274656401001c61626f72746564206279207468652061"
    + "646d696e6973747261746f72");
  assert.ok(await verifySignature(SERVER_KEY, campaign, SIGNATURES.campaign));
  assert.ok(await verifySignature(SERVER_KEY, parameters, SIGNATURES.parameters));
  assert.ok(await verifySignature(SERVER_KEY, end, SIGNATURES.end));
  assert.ok(!(await verifySignature(SERVER_KEY, parameters, SIGNATURES.campaign)));
  assert.ok(!(await verifySignature(SERVER_KEY, campaign, "not base64url!")));
  assert.equal(toHex(endMessage("c", "done", null)).slice(-2), "00");
});
