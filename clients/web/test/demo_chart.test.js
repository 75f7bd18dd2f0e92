// The demo page's chart: every estimate is a bar from the zero line, a negative one to
// its left, and the axis reaches below zero far enough to show it with its error line.

import assert from "node:assert/strict";
import { test } from "node:test";

import { chartSvg } from "../demo/chart.js";

/** The chart's bars by item id ({ x, width, negative }) and its zero line's x. */
function geometry(svg) {
  const bars = new Map();
  for (const match of svg.matchAll(/<rect class="(bar(?: negative)?)" data-item="(\d+)" x="([^"]+)" y="[^"]+" width="([^"]+)"/g)) {
    bars.set(Number(match[2]), { x: Number(match[3]), width: Number(match[4]), negative: match[1] === "bar negative" });
  }
  const zero = Number(svg.match(/<line class="zero" x1="([^"]+)"/)[1]);
  return { bars, zero };
}

const ROWS = [
  { id: 0, name: "news", estimate: 0.2, standard_error: 0.03, truth: 0.21 },
  { id: 1, name: "travel", estimate: -0.036, standard_error: 0.05, truth: 0.01 },
  { id: 2, name: "bbs", estimate: 0.0, standard_error: 0.02, truth: 0 },
  { id: 3, name: "<odd & name>", estimate: -0.2, standard_error: 0.01, truth: 0 },
];

test("a negative estimate is a bar to the left of zero, a positive one to its right", () => {
  const svg = chartSvg(ROWS, new Set([0]));
  const { bars, zero } = geometry(svg);
  assert.equal(bars.size, ROWS.length);
  const close = (a, b) => Math.abs(a - b) < 1e-9;
  // news: starts at zero, runs right; travel and the odd one: end at zero, run left
  assert.ok(close(bars.get(0).x, zero) && bars.get(0).width > 0 && !bars.get(0).negative);
  for (const id of [1, 3]) {
    const bar = bars.get(id);
    assert.ok(bar.negative, `item ${id}`);
    assert.ok(bar.width > 0 && close(bar.x + bar.width, zero), `item ${id}: ${JSON.stringify(bar)}`);
  }
  // bar lengths are to scale on both sides of zero
  const perUnit = bars.get(0).width / 0.2;
  assert.ok(close(bars.get(3).width / perUnit, 0.2));
  assert.ok(close(bars.get(1).width / perUnit, 0.036));
  assert.ok(close(bars.get(2).width, 0));
  // the axis is labelled at its ends and at zero, the lowest end below zero
  assert.match(svg, /text-anchor="start">-21%<\/text>/);
  assert.match(svg, /text-anchor="middle">0%<\/text>/);
  assert.match(svg, /&lt;odd &amp; name&gt;/);
  assert.match(svg, /class="mine">news \(yours\)/);
});

test("without negative values, zero is the left end of the axis", () => {
  const { bars, zero } = geometry(chartSvg([ROWS[0]], new Set()));
  assert.equal(zero, 150);
  assert.equal(bars.get(0).x, 150);
});
