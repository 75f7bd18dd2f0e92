// One user of an app that installed the package, under Node: one phase per run, as
// separate launches of the app would (tests/test_web_package.py).
//
//   node node-user.mjs job.json
//
// job: { phase: "round1" | "round2", target: { shufflerUrl, campaignId, serverKey },
//        invitation, levelIndex, items, state }; prints { state, sent } as JSON.

import { readFile } from "node:fs/promises";

import { Session } from "segshuffle-web";

const job = JSON.parse(await readFile(process.argv[2], "utf8"));
let session;
let sent;
if (job.phase === "round1") {
  session = new Session(job.target);
  await session.campaign();
  await session.enroll(job.invitation);
  sent = await session.submitLevel(job.levelIndex);
} else {
  session = await Session.resume(job.state, job.target);
  await session.waitForPhase("round2", { timeoutMs: 120000, intervalMs: 200 });
  await session.fetchParameters();
  sent = await session.submitData(job.items);
}
process.stdout.write(`${JSON.stringify({ state: session.state, sent })}\n`);
