// The accountant against the Python accountant: every delta_user and verdict of
// docs/test-vectors.json, user_delta at other sizes, and the special functions against
// 50-digit references (test/fixtures/make_accountant_reference.py writes the fixture).

import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { test } from "node:test";

import { AccountantError, userDelta } from "../src/accountant/index.js";
import {
  binomCdf, binomPmf, binomSf, fsum, halfTail, lnFactorial, poissonCdf, poissonPmf, poissonSf,
} from "../src/accountant/distributions.js";
import { irfft, multiplySpectra, rfft } from "../src/accountant/fft.js";

const readJson = async (path) => JSON.parse(await readFile(new URL(path, import.meta.url), "utf8"));
const VECTORS = await readJson("../../../docs/test-vectors.json");
const REFERENCE = await readJson("./fixtures/accountant-reference.json");

/** Agreement with Python beyond rounding. */
const RELATIVE = 1e-9;

/**
 * The absolute allowance for the FFT's rounding.  Upper bounds that go through an FFT
 * composition include a charge for its rounding, measured from the computed transform
 * (privacy_loss.js); that charge depends on the transform's length and algorithm, and
 * moves by up to ~7e-14 when Python itself swaps its FFT for another.  The vectors file
 * compares recomputed delta_user values with the same 1e-13 (RECOMPUTED_ABSOLUTE_TOLERANCE).
 */
const FFT_ROUNDING = 1e-13;

function close(actual, expected) {
  return Math.abs(actual - expected) <= RELATIVE * Math.abs(expected) + FFT_ROUNDING;
}

/** Every (call, expected) pair of the vectors file. */
function vectorCases() {
  const cases = [];
  for (const row of VECTORS.accountant) {
    for (const verdict of row.verdicts) {
      cases.push({
        args: [verdict.level, row.lambda, row.set_size, row.users, row.m, row.domain_size],
        options: { mode: row.mode, delta: row.delta },
        expected: verdict.delta_user, holds: verdict.holds, delta: row.delta,
      });
    }
  }
  for (const document of VECTORS.parameters) {
    const p = document.parameters;
    for (const verdict of document.level_verdicts) {
      cases.push({
        args: [verdict.level, verdict.lambda, p.set_size, p.honest_users, p.m, p.privacy_domain_size],
        options: { mode: p.blanket_mode ?? "slots", delta: p.delta },
        expected: verdict.delta_user, holds: verdict.holds, delta: p.delta,
      });
    }
  }
  return cases;
}

test("every delta_user and verdict of docs/test-vectors.json", () => {
  assert.equal(VECTORS.accountant.length, 24);
  assert.equal(VECTORS.parameters.length, 33);
  const cases = vectorCases();
  assert.equal(cases.length, 24 * 3 + 33 * 3);
  let worstRelative = 0;
  let worstAbsolute = 0;
  for (const { args, options, expected, holds, delta } of cases) {
    const value = userDelta(...args, options);
    const label = `userDelta(${args.join(", ")}, ${JSON.stringify(options)})`;
    assert.ok(close(value, expected), `${label} = ${value}, Python ${expected}`);
    assert.equal(value <= delta, holds, `${label}: verdict`);
    worstRelative = Math.max(worstRelative, Math.abs(value - expected) / expected);
    worstAbsolute = Math.max(worstAbsolute, Math.abs(value - expected));
  }
  assert.ok(worstAbsolute < FFT_ROUNDING, `worst absolute difference ${worstAbsolute}`);
});

test("user_delta beyond the vectors' sizes (h from 15 to a million, every branch)", () => {
  const branches = new Set();
  for (const row of REFERENCE.user_delta) {
    const value = userDelta(row.level, row.lambda, row.set_size, row.users, row.m,
      row.domain_size, { mode: row.mode, delta: row.delta });
    assert.ok(close(value, row.delta_user),
      `${JSON.stringify(row)}: got ${value}`);
    branches.add(row.branch);
  }
  assert.deepEqual([...branches].sort(),
    ["groups", "groups+exact-pair", "independent", "joint", "revealed", "single"]);
});

test("the rates a server publishes for large campaigns are accepted (headroom 1e-5)", () => {
  assert.ok(REFERENCE.published.length >= 6);
  for (const row of REFERENCE.published) {
    const value = userDelta(row.level, row.lambda, row.set_size, row.users, row.m,
      row.domain_size, { mode: row.mode, delta: row.delta });
    assert.ok(value <= row.delta, `${JSON.stringify(row)}: got ${value}, refused`);
    assert.ok(Math.abs(value - row.delta_user) <= 1e-5 * row.delta,
      `${JSON.stringify(row)}: got ${value}, Python ${row.delta_user}`);
  }
});

const SPECIAL = {
  binomPmf, binomCdf, binomSf, poissonPmf, poissonCdf, poissonSf, halfTail, lnFactorial, fsum,
};

test("point masses, tails and log-factorials against 50-digit references", () => {
  for (const { function: name, args, value: expected } of REFERENCE.special) {
    const value = SPECIAL[name](...args);
    const label = `${name}(${JSON.stringify(args).slice(1, -1).slice(0, 60)})`;
    if (name === "fsum") {
      assert.equal(value, expected, label); // correctly rounded
    } else if (name === "lnFactorial") {
      assert.ok(Math.abs(value - expected) <= 4e-16 * Math.max(1, Math.abs(expected)), `${label} = ${value}`);
    } else if (name.endsWith("Pmf")) {
      assert.ok(Math.abs(value - expected) <= 2e-13 * expected, `${label} = ${value}, not ${expected}`);
    } else {
      // Tails: relative where below 1/2, absolute (the complement's rounding) above.
      const allowed = expected <= 0.5 ? 1e-13 * expected : 2e-15;
      assert.ok(Math.abs(value - expected) <= allowed, `${label} = ${value}, not ${expected}`);
    }
  }
});

test("an FFT convolution agrees with the direct sum", () => {
  const x = Float64Array.from({ length: 300 }, (_, i) => Math.exp(-((i - 150) ** 2) / 800));
  const y = Float64Array.from({ length: 211 }, (_, i) => 1 / (1 + i));
  const n = 512;
  const spectrum = multiplySpectra(rfft(x, n), rfft(y, n));
  const raw = irfft(spectrum.re, spectrum.im, n);
  for (let k = 0; k < n; k += 1) {
    let exact = 0;
    for (let j = Math.max(0, k - y.length + 1); j <= Math.min(k, x.length - 1); j += 1) {
      exact += x[j] * y[k - j];
    }
    assert.ok(Math.abs(raw[k] - exact) < 1e-14, `entry ${k}: ${raw[k]} against ${exact}`);
  }
});

test("arguments out of range throw an AccountantError naming them", () => {
  const valid = [1.0, 0.5, 2, 1000, 1.0, 20];
  const refused = [
    [[31, 0.5, 2, 1000, 1.0, 20], /privacy level must be in \[0, 30\]/],
    [[Number.NaN, 0.5, 2, 1000, 1.0, 20], /privacy level must be finite/],
    [["1", 0.5, 2, 1000, 1.0, 20], /privacy level must be a number/],
    [[1, 1.5, 2, 1000, 1.0, 20], /lambda must be in \[0, 1\]/],
    [[1, 0.5, 2, 0, 1.0, 20], /users must be >= 1/],
    [[1, 0.5, 2, 10.5, 1.0, 20], /users must be an integer/],
    [[1, 0.5, 2, 2e12, 1.0, 20], /users must be at most 1e\+12/],
    [[1, 0.5, 2, 1000, 1.0, 1], /domain size must be >= 2/],
    [[1, 0.5, 0, 1000, 1.0, 20], /set size must be >= 1/],
    [[1, 0.5, 65, 1000, 1.0, 100], /set size must be at most 64/],
    [[1, 0.5, 21, 1000, 1.0, 20], /must not exceed the domain size/],
    [[1, 0.5, 2, 1000, -1, 20], /blanket rate m must be >= 0/],
    [[1, 0.5, 2, 1000, 2000, 20], /blanket rate m must be at most 1024/],
  ];
  for (const [args, message] of refused) {
    assert.throws(() => userDelta(...args), (error) => error instanceof AccountantError
      && message.test(error.message), `${args}`);
  }
  assert.throws(() => userDelta(...valid, { mode: "other" }), /blanket mode must be one of slots, independent/);
  assert.throws(() => userDelta(...valid.slice(0, 4), 30, 20, { mode: "independent" }),
    /at most the privacy domain size 20 in the independent mode/);
  assert.throws(() => userDelta(...valid, { delta: -1 }), AccountantError);
  assert.ok(new AccountantError("x") instanceof Error);
});

test("trivial cases: no rate, no blanket", () => {
  assert.equal(userDelta(1, 0, 2, 1000, 1.0, 20), 0);
  assert.equal(userDelta(1, 0, 2, 1000, 1.0, 20, { mode: "independent" }), 0);
  // m = 0: the victim's message is seen as it is, the bound is 1 at lambda = 1.
  assert.equal(userDelta(1, 1, 1, 1000, 0, 20), 1);
  assert.equal(userDelta(1, 1, 1, 1000, 0, 20, { mode: "independent" }), 1);
});
