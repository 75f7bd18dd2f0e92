// The demo page: one visitor takes part in a campaign with the web client.
//
// The page reads ./config.json (the shuffler's URL, the campaign, the server's
// document-signing key and the visitor's invitation; written by the host that serves
// the page, `python -m segshuffle.testing.web_demo`). The visitor picks a level and
// items; the page runs both rounds with a Session and lists what left the browser, by
// size only: the contents are sealed for the server. Once the campaign is done it draws
// the estimates the host publishes at ./results.json.

import { Session, VerificationError } from "../src/index.js";

const $ = (id) => document.getElementById(id);
const WAIT = { timeoutMs: 30 * 60 * 1000, intervalMs: 1000 };

/** Request bodies the page sent, by route, so the steps can show their sizes. */
const sent = [];

/** fetch, recording the size of each request body (never its contents). */
function recordingFetch(input, init = {}) {
  if (typeof init.body === "string") {
    const path = new URL(typeof input === "string" ? input : input.url).pathname;
    sent.push({ path, bytes: new TextEncoder().encode(init.body).length });
  }
  return fetch(input, init);
}

function lastSent(suffix) {
  return [...sent].reverse().find((entry) => entry.path.endsWith(suffix));
}

function step(text, detail = "", kind = "ok") {
  const item = document.createElement("li");
  item.className = kind;
  item.textContent = text;
  if (detail) {
    const small = document.createElement("div");
    small.className = "detail";
    small.textContent = detail;
    item.append(small);
  }
  $("steps").append(item);
  return item;
}

/** The step counting the levels the accountant has checked, while it runs. */
let checking = null;

/** The Session's onProgress: the accountant runs in a Web Worker, the page stays live. */
function showCheck({ checked, total }) {
  if (checking) checking.textContent = `Checking every level's guarantee: ${checked} of ${total}`;
}

function option(type, name, value, text, checked = false) {
  const label = document.createElement("label");
  const input = document.createElement("input");
  Object.assign(input, { type, name, value, checked });
  label.append(input, text);
  return label;
}

function showCampaign(view) {
  const { config } = view;
  $("campaign").innerHTML = "";
  const title = document.createElement("h2");
  title.textContent = `Campaign ${view.id}`;
  const facts = document.createElement("p");
  facts.className = "muted";
  facts.textContent = `${config.domain_size} items, up to ${config.set_size} per person; `
    + `${config.levels.length} privacy levels. Verified: its configuration hash, the server's `
    + `key (id ${view.key_id}) and the server's signature.`;
  $("campaign").append(title, facts);
  config.levels.forEach((level, index) => {
    $("levels").append(option("radio", "level", index, `epsilon = ${level}`,
      index === Math.floor(config.levels.length / 2)));
  });
  config.items.forEach((name, index) => $("items").append(option("checkbox", "item", index, name)));
  $("items-legend").textContent = `Your items (up to ${config.set_size})`;
  $("items").addEventListener("change", () => {
    const boxes = [...document.querySelectorAll("input[name=item]")];
    const full = boxes.filter((box) => box.checked).length >= config.set_size;
    for (const box of boxes) box.disabled = full && !box.checked;
  });
  $("choices").hidden = false;
}

function describeParameters(parameters, levelIndex) {
  const level = parameters.levels[levelIndex];
  return `m = ${parameters.m.toFixed(3)}, your level's rate lambda = `
    + `${parameters.lambdas[levelIndex].toFixed(3)} at epsilon ${parameters.epsilons[levelIndex]
      .toFixed(3)} <= ${level}; all ${parameters.levels.length} levels checked by the accountant `
    + `at delta = ${parameters.delta.toExponential(1)} with ${parameters.users} users`;
}

async function takePart(session, config, levelIndex, items) {
  $("choices").hidden = true;
  $("progress").hidden = false;
  const names = items.map((id) => session.view.config.items?.[id] ?? `item ${id}`);
  step(`Your choice: epsilon = ${session.view.config.levels[levelIndex]}, ${names.join(" and ")}`,
    "kept on this device; only sealed, randomized messages leave it", "choice");
  await session.enroll(config.invitation);
  step("Enrolled with the invitation", `${lastSent("/enrollments").bytes} bytes: the invitation `
    + "and a fresh random token; nothing about you");
  await session.submitLevel(levelIndex);
  step("Round 1: your privacy level, sealed for the server",
    `${lastSent("/rounds/1/submissions").bytes} bytes; the shuffler cannot read it and the `
    + "server cannot tell it is yours");
  const waiting = step("Waiting for the other users and the release of round 1…", "", "wait");
  await session.waitForPhase("round2", WAIT);
  waiting.remove();
  checking = step("Checking every level's guarantee…", "", "wait");
  const parameters = await session.fetchParameters();
  checking.remove();
  step("The server's parameters, verified", describeParameters(parameters, levelIndex));
  const round2 = await session.submitData(items);
  const body = lastSent("/rounds/2/submissions").bytes;
  step(`Round 2: ${round2.slots.length} sealed messages`,
    `${body} bytes in all, the same count and size for every user at every level: `
    + `your ${items.length} item(s), blanket and padding slots, and nulls`);
  const done = step("Waiting for the release of round 2…", "", "wait");
  await session.waitForPhase("done", WAIT);
  done.remove();
  step("The campaign is done");
  await showResults(config, items);
}

async function showResults(config, mine) {
  for (let tries = 0; tries < 600; tries += 1) {
    const answer = await fetch(config.resultsUrl ?? "./results.json", { cache: "no-store" });
    if (answer.ok) {
      drawChart(await answer.json(), new Set(mine));
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
  step("The host published no results", "", "error");
}

/** A horizontal bar per item: the estimated share, +-1 standard error, the true share. */
function drawChart(results, mine) {
  const rows = results.items;
  const width = 800;
  const rowHeight = 24;
  const left = 150;
  const top = 10;
  const height = top + rows.length * rowHeight + 30;
  const most = Math.max(0.05, ...rows.map((r) => Math.max((r.estimate ?? 0) + (r.standard_error ?? 0),
    r.truth ?? 0)));
  const x = (share) => left + Math.max(0, share) / most * (width - left - 60);
  const svg = [`<svg viewBox="0 0 ${width} ${height}" role="img" aria-label="estimates">`];
  rows.forEach((row, i) => {
    const y = top + i * rowHeight;
    const name = row.name ?? `item ${row.id}`;
    svg.push(`<text x="${left - 8}" y="${y + 15}" text-anchor="end"${mine.has(row.id) ? ' class="mine"' : ""}>`
      + `${escapeText(name)}${mine.has(row.id) ? " (yours)" : ""}</text>`);
    if (row.estimate !== null) {
      svg.push(`<rect class="bar" x="${left}" y="${y + 4}" width="${x(row.estimate) - left}" height="14" rx="2"/>`);
      const se = row.standard_error ?? 0;
      svg.push(`<line class="se" x1="${x(row.estimate - se)}" x2="${x(row.estimate + se)}" `
        + `y1="${y + 11}" y2="${y + 11}"/>`);
      svg.push(`<text x="${x(Math.max(row.estimate + se, row.truth ?? 0)) + 6}" y="${y + 15}">`
        + `${(100 * row.estimate).toFixed(1)}%</text>`);
    }
    if (row.truth !== undefined) {
      svg.push(`<line class="truth" x1="${x(row.truth)}" x2="${x(row.truth)}" y1="${y + 1}" y2="${y + 21}"/>`);
    }
  });
  const axisY = top + rows.length * rowHeight + 6;
  svg.push(`<line class="axis" x1="${left}" x2="${width - 60}" y1="${axisY}" y2="${axisY}"/>`);
  svg.push(`<text x="${left}" y="${axisY + 18}">0%</text>`);
  svg.push(`<text x="${width - 60}" y="${axisY + 18}" text-anchor="end">${(100 * most).toFixed(0)}%</text>`);
  svg.push("</svg>");
  $("chart").innerHTML = svg.join("");
  const legend = document.createElement("div");
  legend.className = "legend";
  legend.innerHTML = '<span class="estimate">estimated share of users (+-1 standard error)</span>'
    + '<span class="truth">true share</span>';
  $("chart").append(legend);
  $("results-note").textContent = `${results.users} users in round 2. The server saw only the `
    + "shuffled histogram of messages; these are its estimates of how many users hold each item.";
  $("results").hidden = false;
  document.body.dataset.state = "results";
}

function escapeText(text) {
  return text.replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
}

async function main() {
  const config = await (await fetch("./config.json", { cache: "no-store" })).json();
  const session = new Session({
    shufflerUrl: config.shufflerUrl, campaignId: config.campaignId, serverKey: config.serverKey,
    fetch: recordingFetch, onProgress: showCheck,
  });
  showCampaign(await session.campaign());
  document.body.dataset.state = "ready";
  $("choices").addEventListener("submit", (event) => {
    event.preventDefault();
    const levelIndex = Number(document.querySelector("input[name=level]:checked").value);
    const items = [...document.querySelectorAll("input[name=item]:checked")].map((box) => Number(box.value));
    takePart(session, config, levelIndex, items).catch(fail);
  });
}

function fail(error) {
  $("progress").hidden = false;
  const what = error instanceof VerificationError
    ? `Refused: ${error.message} (check ${error.check}); nothing was sent`
    : `${error.name}: ${error.message}`;
  step(what, "", "error");
  document.body.dataset.state = "error";
}

main().catch(fail);
