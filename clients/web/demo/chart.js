// The demo's chart of the estimates: one horizontal bar per item from zero to its
// estimated share, a +-1 standard error line and a mark at the true share. The estimator
// is unbiased, so an item few users hold can come out below zero: its bar runs to the
// left of the zero line, which stands where zero falls between the smallest and largest
// value drawn.

const WIDTH = 800;
const ROW = 24;
const LEFT = 150;
const RIGHT = WIDTH - 70;
const TOP = 10;

/** @param {string} text */
function escapeText(text) {
  return text.replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
}

/**
 * The chart as SVG text.
 * @param {{ id: number, name?: string | null, estimate: number | null,
 *   standard_error?: number | null, truth?: number }[]} rows
 * @param {Set<number>} mine the ids of the visitor's items (drawn in bold)
 * @returns {string}
 */
export function chartSvg(rows, mine) {
  const height = TOP + rows.length * ROW + 30;
  const ends = rows.flatMap((r) => (r.estimate === null ? [r.truth ?? 0]
    : [r.estimate - (r.standard_error ?? 0), r.estimate + (r.standard_error ?? 0), r.truth ?? 0]));
  const most = Math.max(0.05, ...ends);
  const least = Math.min(0, ...ends);
  const x = (share) => LEFT + (share - least) / (most - least) * (RIGHT - LEFT);
  const zero = x(0);
  const svg = [`<svg viewBox="0 0 ${WIDTH} ${height}" role="img" aria-label="estimates">`];
  rows.forEach((row, i) => {
    const y = TOP + i * ROW;
    const name = row.name ?? `item ${row.id}`;
    const yours = mine.has(row.id);
    svg.push(`<text x="${LEFT - 8}" y="${y + 15}" text-anchor="end"${yours ? ' class="mine"' : ""}>`
      + `${escapeText(name)}${yours ? " (yours)" : ""}</text>`);
    if (row.estimate !== null) {
      const end = x(row.estimate);
      const kind = row.estimate < 0 ? "bar negative" : "bar";
      svg.push(`<rect class="${kind}" data-item="${row.id}" x="${Math.min(zero, end)}" y="${y + 4}" `
        + `width="${Math.abs(end - zero)}" height="14" rx="2"/>`);
      const se = row.standard_error ?? 0;
      svg.push(`<line class="se" x1="${x(row.estimate - se)}" x2="${x(row.estimate + se)}" `
        + `y1="${y + 11}" y2="${y + 11}"/>`);
      svg.push(`<text x="${x(Math.max(row.estimate + se, row.truth ?? 0, 0)) + 6}" y="${y + 15}">`
        + `${(100 * row.estimate).toFixed(1)}%</text>`);
    }
    if (row.truth !== undefined) {
      svg.push(`<line class="truth" x1="${x(row.truth)}" x2="${x(row.truth)}" y1="${y + 1}" y2="${y + 21}"/>`);
    }
  });
  const axisY = TOP + rows.length * ROW + 6;
  svg.push(`<line class="axis" x1="${LEFT}" x2="${RIGHT}" y1="${axisY}" y2="${axisY}"/>`);
  svg.push(`<line class="zero" x1="${zero}" x2="${zero}" y1="${TOP}" y2="${axisY}"/>`);
  svg.push(`<text x="${zero}" y="${axisY + 18}" text-anchor="middle">0%</text>`);
  if (least < 0) {
    svg.push(`<text x="${LEFT}" y="${axisY + 18}" text-anchor="start">${(100 * least).toFixed(0)}%</text>`);
  }
  svg.push(`<text x="${RIGHT}" y="${axisY + 18}" text-anchor="end">${(100 * most).toFixed(0)}%</text>`);
  svg.push("</svg>");
  return svg.join("");
}
