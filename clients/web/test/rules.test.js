// The shared rules against values the services' own definitions give
// (fixtures/rules.json: every (n, tau, f) of a grid where a floating-point product would
// round differently from the exact rule, and the blanket geometry of both modes).

import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { test } from "node:test";

import {
  accountingUsers, blanketSlots, CLIENT_DELTA_CEILING, decimalFraction, defaultDelta, honestUsers,
  messagesPerUser,
} from "../src/rules.js";

const FIXTURE = JSON.parse(await readFile(new URL("./fixtures/rules.json", import.meta.url), "utf8"));

test("n_min and h are exact on the tolerances' shortest decimals", () => {
  assert.ok(FIXTURE.counts.length > 100);
  for (const [n, tau, f, nMin, h] of FIXTURE.counts) {
    assert.equal(accountingUsers(n, tau), nMin, `n_min of ${n}, ${tau}`);
    assert.equal(honestUsers(n, tau, f), h, `h of ${n}, ${tau}, ${f}`);
  }
  assert.equal(accountingUsers(100, 0.45), 55);
  assert.equal(accountingUsers(10, 0.7), 3);
  assert.equal(accountingUsers(0, 0.1), 1);
  assert.equal(accountingUsers(2.5, 0.2), 2); // fractional level estimates
  assert.throws(() => accountingUsers(10, 1));
  assert.throws(() => honestUsers(10, 0.1, -0.1));
  assert.throws(() => accountingUsers(Number.NaN, 0.1));
});

test("decimal fractions are the numbers' shortest decimals", () => {
  assert.deepEqual(decimalFraction(0.45), { num: 45n, den: 100n });
  assert.deepEqual(decimalFraction(1e-7), { num: 1n, den: 10000000n });
  assert.deepEqual(decimalFraction(1e21), { num: 10n ** 21n, den: 1n });
  assert.deepEqual(decimalFraction(1000), { num: 1000n, den: 1n });
});

test("the blanket geometry of both modes, caps included", () => {
  const rows = [...FIXTURE.geometry, ["independent", 4, 0.3, 4093, 4093, null]];
  for (const [mode, s, m, d, slots, messages] of rows) {
    if (slots === null) {
      assert.throws(() => blanketSlots(m, d, mode), RangeError, `${mode} ${m} ${d}`);
    } else {
      assert.equal(blanketSlots(m, d, mode), slots, `${mode} ${m} ${d}`);
    }
    if (messages === null) {
      assert.throws(() => messagesPerUser(s, m, d, mode), RangeError, `${mode} ${s} ${m} ${d}`);
    } else {
      assert.equal(messagesPerUser(s, m, d, mode), messages, `${mode} ${s} ${m} ${d}`);
    }
  }
  assert.throws(() => blanketSlots(Number.NaN, 10, "slots"));
  assert.throws(() => blanketSlots(-1, 10, "slots"));
  assert.throws(() => blanketSlots(1, 10, "other"));
});

test("the default delta and the client's ceiling", () => {
  assert.equal(defaultDelta(1000), 1e-5);
  assert.equal(defaultDelta(1000), 0.01 / 1000);
  assert.equal(CLIENT_DELTA_CEILING, 1e-3); // fixed: no campaign setting moves it
  assert.throws(() => defaultDelta(0));
});
