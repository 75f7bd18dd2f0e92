// The demo page: one visitor takes part in a campaign with the web client.
//
// The page reads ./config.json (the shuffler's URL, the campaign, the server's
// document-signing key, the visitor's invitation and how many users the host expects;
// written by the host that serves the page, `python -m segshuffle.testing.web_demo`). The
// visitor picks a level and items; the page runs both rounds with a Session and lists
// what left the browser, by size only: the contents are sealed for the server. While a
// round waits for the others and its release, the page shows how many users it holds
// (the shuffler's round status). Once the campaign is done it draws the estimates the
// host publishes at ./results.json, negative ones as bars to the left of zero.

import { Session, VerificationError } from "../src/index.js";
import { chartSvg } from "./chart.js";

const $ = (id) => document.getElementById(id);
const WAIT = { timeoutMs: 30 * 60 * 1000, intervalMs: 1000 };
/** Milliseconds between two looks at a round's status while the page waits. */
const STATUS_MS = 1000;

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

/**
 * Wait for the campaign to reach `phase` while a step shows round `round`'s progress: the
 * users it holds (of the `expected` the host announced) and whether it is released. The
 * step stays on the page, as the record of the round.
 */
async function roundWithProgress(session, round, phase, expected) {
  const item = step(`Round ${round}: waiting for the other users…`, "", "wait");
  const bar = document.createElement("progress");
  bar.max = expected ?? 1;
  bar.value = 0;
  item.append(bar);
  const detail = document.createElement("div");
  detail.className = "detail";
  item.append(detail);
  let ended = false;
  const started = performance.now();
  const show = async () => {
    try {
      const status = await session.roundStatus(round, { fresh: true });
      if (ended) return;
      const of = expected ? ` of ${expected}` : "";
      bar.value = Math.min(status.participants, bar.max);
      detail.textContent = `${status.participants}${of} users have taken part; the operator `
        + `may release the round once it holds ${status.required}`;
      if (expected && status.participants >= expected) {
        item.firstChild.textContent = `Round ${round}: everyone is in; the server is `
          + (round === 1 ? "decoding the levels and choosing the parameters…" : "decoding the data…");
      }
    } catch {
      // a look that fails changes nothing: the wait itself reports real failures
    }
  };
  await show();
  const timer = setInterval(show, STATUS_MS);
  try {
    await session.waitForPhase(phase, WAIT);
  } finally {
    ended = true;
    clearInterval(timer);
  }
  const status = await session.roundStatus(round, { fresh: true });
  const seconds = ((performance.now() - started) / 1000).toFixed(0);
  item.className = "ok";
  item.firstChild.textContent = `Round ${round} released: ${status.participants} users took part`;
  bar.max = 1;
  bar.value = 1;
  detail.textContent = `after ${seconds} s of waiting for the others and the server`;
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
  await roundWithProgress(session, 1, "round2", config.users);
  checking = step("Checking every level's guarantee…", "", "wait");
  const parameters = await session.fetchParameters();
  checking.remove();
  step("The server's parameters, verified", describeParameters(parameters, levelIndex));
  const round2 = await session.submitData(items);
  const body = lastSent("/rounds/2/submissions").bytes;
  step(`Round 2: ${round2.slots.length} sealed messages`,
    `${body} bytes in all, the same count and size for every user at every level: `
    + `your ${items.length} item(s), blanket and padding slots, and nulls`);
  await roundWithProgress(session, 2, "done", config.users);
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

/** The estimates as a chart (chart.js), its legend and a note. */
function drawChart(results, mine) {
  $("chart").innerHTML = chartSvg(results.items, mine);
  const legend = document.createElement("div");
  legend.className = "legend";
  legend.innerHTML = '<span class="estimate">estimated share of users (+-1 standard error)</span>'
    + '<span class="negative">an estimate below zero</span><span class="truth">true share</span>';
  $("chart").append(legend);
  $("results-note").textContent = `${results.users} users in round 2. The server saw only the `
    + "shuffled messages; these are its estimates of how many users hold each item. They are "
    + "unbiased, so an item few users hold can come out below zero.";
  $("results").hidden = false;
  document.body.dataset.state = "results";
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
