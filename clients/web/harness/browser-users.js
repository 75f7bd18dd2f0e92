// Several users of the web client in one browser page, for the browser test
// (tests/test_web_browser.py drives it with headless Chromium).
//
// Each user is its own Session, as a separate app install would be. Between the rounds
// a user keeps nothing but its saved-session document, stored in localStorage the way
// an app would keep it, and round 2 resumes from that document alone (a reload of the
// page in between loses nothing). Every request goes over the page's fetch to the
// shuffler, cross-origin, with WebCrypto doing the HPKE sealing and the signature checks
// and the accountant verifying the published parameters before anything of round 2 is
// sent.

import { Session } from "../src/index.js";

const log = document.getElementById("log");
const storageKey = (name) => `segshuffle-user-${name}`;

function note(line) {
  log.textContent += `${line}\n`;
}

/**
 * @typedef {{ shufflerUrl: string, campaignId: string, serverKey: string }} Target
 * @typedef {{ name: string, invitation: string, levelIndex: number }} Round1User
 * @typedef {{ name: string, items: number[] }} Round2User
 */

/**
 * Enroll and send round 1 for every user; their saved documents go to localStorage.
 * @param {Target} target @param {Round1User[]} users
 * @returns {Promise<{ name: string, reportedLevel: number }[]>}
 */
async function round1(target, users) {
  return Promise.all(users.map(async (user) => {
    const session = new Session({
      ...target,
      onStateChange: (state) => localStorage.setItem(storageKey(user.name), JSON.stringify(state)),
    });
    await session.campaign();
    await session.enroll(user.invitation);
    const sent = await session.submitLevel(user.levelIndex);
    note(`${user.name}: round 1 sent`);
    return { name: user.name, reportedLevel: sent.reportedLevel };
  }));
}

/**
 * Resume every user from its saved document, wait for round 2, verify the parameters
 * and send the data. Returns what each sent (its slots' item ids; null for a null
 * message), which the test adds up against the decoded counts.
 * @param {Target} target @param {Round2User[]} users
 */
async function round2(target, users) {
  return Promise.all(users.map(async (user) => {
    const saved = localStorage.getItem(storageKey(user.name));
    if (saved === null) throw new Error(`${user.name}: no saved session`);
    const session = await Session.resume(saved, target);
    await session.waitForPhase("round2", { timeoutMs: 120000, intervalMs: 250 });
    const parameters = await session.fetchParameters();
    const sent = await session.submitData(user.items);
    note(`${user.name}: round 2 sent (${sent.slots.length} slots, m = ${parameters.m})`);
    return { name: user.name, reportedLevel: sent.reportedLevel, slots: sent.slots };
  }));
}

window.browserUsers = { round1, round2 };
document.body.dataset.ready = "true";
