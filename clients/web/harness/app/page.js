// One user of an app that installed the package, in a page: round 1, then, after a reload,
// round 2 from the saved document in localStorage (tests/test_web_package.py).

import { Session } from "segshuffle-web";

const KEY = "segshuffle-app-user";
const store = (state) => localStorage.setItem(KEY, JSON.stringify(state));

async function round1(target, invitation, levelIndex) {
  const session = new Session({ ...target, onStateChange: store });
  await session.campaign();
  await session.enroll(invitation);
  return session.submitLevel(levelIndex);
}

async function round2(target, items) {
  const session = await Session.resume(localStorage.getItem(KEY), { ...target, onStateChange: store });
  await session.waitForPhase("round2", { timeoutMs: 120000, intervalMs: 250 });
  await session.fetchParameters();
  return session.submitData(items);
}

window.appUser = { round1, round2 };
document.body.dataset.ready = "true";
