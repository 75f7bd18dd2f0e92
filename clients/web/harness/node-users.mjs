// Drives web-client users against live services, one phase per run, as separate app
// launches would: tests/test_web_client_session.py writes a job file and reads the
// report this prints.
//
//   node node-users.mjs job.json
//
// job: { phase: "round1" | "round2", shufflerUrl, campaignId, serverKey, allowInsecure,
//        users: [{ invitation, levelIndex, items, state }] }
// round1: each user fetches and verifies the campaign, enrolls with its invitation and
//   sends its level; the report carries its saved state and what it sent.
// round2: each user is resumed from its saved state (from a round-1 run, or saved by
//   the Python SDK), waits for round 2, verifies the parameters and sends its items.
// Report (stdout, JSON): { users: [{ state, stateText, round1, round2, error: { name, check, checks, message }
//   | null }] }; stateText is the state as the Python SDK reads it (stateJson).

import { readFile } from "node:fs/promises";

import { SegshuffleError, Session, stateJson } from "../src/index.js";

const job = JSON.parse(await readFile(process.argv[2], "utf8"));
const common = {
  shufflerUrl: job.shufflerUrl, serverKey: job.serverKey, allowInsecure: job.allowInsecure === true,
  retry: { initialDelayMs: 100, maxDelayMs: 2000, budgetMs: 60000 },
};

async function round1(user) {
  const session = new Session({ ...common, campaignId: job.campaignId });
  await session.campaign();
  await session.enroll(user.invitation);
  const sent = await session.submitLevel(user.levelIndex);
  return { state: session.state, stateText: stateJson(session.state), round1: sent };
}

async function round2(user) {
  const session = await Session.resume(user.state, { ...common, campaignId: job.campaignId });
  await session.waitForPhase("round2", { timeoutMs: 120000, intervalMs: 200 });
  await session.fetchParameters();
  const sent = await session.submitData(user.items);
  return { state: session.state, round2: sent };
}

function describe(error) {
  if (!(error instanceof SegshuffleError)) throw error; // a bug: let the run fail loudly
  return { name: error.name, check: error.check ?? null, checks: error.checks ?? null,
    message: error.message };
}

const run = job.phase === "round1" ? round1 : round2;
const users = await Promise.all(job.users.map(async (user) => {
  try {
    return { ...(await run(user)), error: null };
  } catch (error) {
    return { state: user.state ?? null, error: describe(error) };
  }
}));
process.stdout.write(`${JSON.stringify({ users })}\n`);
