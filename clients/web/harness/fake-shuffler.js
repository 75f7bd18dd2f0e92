// Test support (not part of the package): an in-memory shuffler behind a fake fetch, for
// the session's unit tests. It serves one campaign of docs/test-vectors.json (the
// server's view, key config and, once round 1 is "released", its parameters), signs the
// views with a key of its own, enrolls against invitations idempotently, and opens every
// submission with the vectors' private key, as the services would, so a test can see
// exactly what a client sent. Faults are injected per route. Time is the test's clock
// (`now`, which the sessions are given too): it decides when the round-1 status says
// released and when an outage ends.

import { fromBase64url, fromHex, toBase64url } from "../src/bytes.js";
import { buildInfo, open } from "../src/hpke.js";
import { campaignMessage, endMessage, parametersMessage } from "../src/signatures.js";
import { KEY_CONFIG, PRIVATE_KEY, PUBLIC_KEY } from "./vectors.js";

const PROBLEM_HEADERS = { "content-type": "application/problem+json" };

function answer(status, body, headers = {}) {
  return new Response(JSON.stringify(body), {
    status, headers: { "content-type": "application/json", ...headers },
  });
}

function problem(status, name, detail, headers = {}) {
  return new Response(JSON.stringify({
    type: `urn:segshuffle:error:${name}`, title: name, status, detail,
  }), { status, headers: { ...PROBLEM_HEADERS, ...headers } });
}

/** A campaign of the vectors behind a fake fetch (see the module comment). */
export class FakeShuffler {
  /**
   * @param {object} vector an entry of VECTORS.parameters
   * @param {{ invitations?: string[], now?: () => number }} [options]
   */
  static async create(vector, options = {}) {
    const pair = await crypto.subtle.generateKey({ name: "Ed25519" }, true, ["sign", "verify"]);
    const serverKey = toBase64url(new Uint8Array(await crypto.subtle.exportKey("raw", pair.publicKey)));
    return new FakeShuffler(vector, pair.privateKey, serverKey, options.invitations ?? ["invite-1"],
      options.now ?? Date.now);
  }

  constructor(vector, signingKey, serverKey, invitations, now = Date.now) {
    this.vector = vector;
    this.signingKey = signingKey;
    /** The server's document-signing key, as an app ships it. */
    this.serverKey = serverKey;
    this.id = vector.config.id;
    this.now = now;
    this.publishedAt = null;
    this.round1ReleasedAt = null;
    /** route -> the time until which it answers 503 (see outage()). */
    this.outages = new Map();
    this.ended = null;
    this.endReason = null;
    this.invitations = new Map(invitations.map((code) => [code, null]));
    this.tokens = new Set();
    /** Opened submissions per round: { token, level: Uint8Array, data: Uint8Array[] }. */
    this.submissions = { 1: new Map(), 2: new Map() };
    this.round1Participants = null;
    this.round2Required = vector.parameters.accounting_users;
    /** Every request, as { method, path, headers, body }. */
    this.requests = [];
    /** route name -> list of faults to apply to its next requests (see fault()). */
    this.faults = new Map();
    /** Changes a test makes to what the relay serves (a dishonest relay). */
    this.tamper = {
      view: (view) => view, keyConfig: (config) => config, parameters: (parameters) => parameters,
    };
    this.fetch = this.fetch.bind(this);
  }

  /**
   * The next request on `route` (`view`, `key`, `enroll`, `submit1`, `submit2`,
   * `status1`, `status2`) meets `fault`: `lost` (handled, answer lost), `stored-503`
   * (handled, then a 503 instead of the answer, as a proxy that timed out says), `down`
   * (never arrives), `refused` (the connection is refused: certainly never arrives), or a
   * Response to answer instead.
   */
  fault(route, ...faults) {
    this.faults.set(route, [...(this.faults.get(route) ?? []), ...faults]);
  }

  /** Every request on `route` is answered 503 (Retry-After: 1) until `now()` reaches `untilMs`. */
  outage(route, untilMs) {
    this.outages.set(route, untilMs);
  }

  /**
   * Round 1 released: the view says round 2, with the parameters, `afterMs` from now; the
   * round-1 status says released `statusLagMs` after that, as a shuffler still recording
   * the server's acknowledgement does.
   */
  release1({ statusLagMs = 0, afterMs = 0 } = {}) {
    this.publishedAt = this.now() + afterMs;
    this.round1ReleasedAt = this.publishedAt + statusLagMs;
  }

  abort(reason) {
    this.ended = "aborted";
    this.endReason = reason;
  }

  get phase() {
    if (this.ended !== null) return this.ended;
    return this.publishedAt !== null && this.now() >= this.publishedAt ? "round2" : "round1";
  }

  /** The bodies of the submission requests of a round that reached the shuffler. */
  posts(round) {
    return this.requests.filter((r) => r.method === "POST" && r.path.endsWith(`/rounds/${round}/submissions`))
      .map((r) => r.body);
  }

  async #sign(message) {
    return toBase64url(new Uint8Array(await crypto.subtle.sign({ name: "Ed25519" }, this.signingKey, message)));
  }

  async view() {
    const { config, config_hash: configHash, parameters_hash: parametersHash } = this.vector;
    const parameters = this.tamper.parameters(this.vector.parameters);
    const published = this.phase !== "round1";
    const view = {
      id: this.id, phase: this.phase, config, config_hash: configHash, key_id: KEY_CONFIG.key_id,
      hpke_config: KEY_CONFIG, parameters: published ? parameters : null,
      parameters_hash: published ? parametersHash : null, end_reason: this.endReason,
      signatures: {
        campaign: await this.#sign(campaignMessage(this.id, configHash, KEY_CONFIG.key_id, PUBLIC_KEY)),
        parameters: published ? await this.#sign(parametersMessage(this.id, parametersHash)) : null,
        end: ["done", "failed", "aborted"].includes(this.phase)
          ? await this.#sign(endMessage(this.id, this.phase, this.endReason)) : null,
      },
    };
    return this.tamper.view(view);
  }

  /** The fake fetch. */
  async fetch(url, init = {}) {
    const { pathname } = new URL(url);
    const method = init.method ?? "GET";
    const body = init.body === undefined ? undefined : JSON.parse(init.body);
    const route = this.#route(method, pathname);
    const fault = this.faults.get(route)?.shift();
    if (fault === "refused") {
      throw Object.assign(new TypeError("fetch failed"), { cause: { code: "ECONNREFUSED" } });
    }
    this.requests.push({ method, path: pathname, headers: init.headers ?? {}, body });
    if (fault === "down") throw new TypeError("fetch failed");
    if (fault instanceof Response) return fault;
    if (this.now() < (this.outages.get(route) ?? -Infinity)) {
      return problem(503, "unavailable", "restarting", { "retry-after": "1" });
    }
    const response = await this.#handle(route, init, body);
    if (fault === "lost") throw new TypeError("fetch failed: the connection was reset");
    if (fault === "stored-503") return problem(503, "unavailable", "the answer timed out at a proxy");
    return response;
  }

  #route(method, path) {
    const prefix = `/v1/campaigns/${this.id}`;
    const routes = {
      [`GET ${prefix}`]: "view", [`GET ${prefix}/hpke-config`]: "key",
      [`POST ${prefix}/enrollments`]: "enroll",
      [`POST ${prefix}/rounds/1/submissions`]: "submit1", [`POST ${prefix}/rounds/2/submissions`]: "submit2",
      [`GET ${prefix}/rounds/1`]: "status1", [`GET ${prefix}/rounds/2`]: "status2",
    };
    return routes[`${method} ${path}`] ?? "unknown";
  }

  async #handle(route, init, body) {
    switch (route) {
      case "view":
        return answer(200, await this.view());
      case "key":
        return answer(200, this.tamper.keyConfig({ ...KEY_CONFIG }));
      case "enroll":
        return this.#enroll(body);
      case "submit1":
      case "submit2":
        return this.#submit(Number(route.at(-1)), init.headers?.authorization, body);
      case "status1":
        return answer(200, {
          campaign_id: this.id, round: 1, participants: this.round1Participants
            ?? Math.max(this.submissions[1].size, this.vector.parameters.users),
          required: this.vector.config.min_users,
          released: this.round1ReleasedAt !== null && this.now() >= this.round1ReleasedAt,
        });
      case "status2":
        return answer(200, {
          campaign_id: this.id, round: 2, participants: this.submissions[2].size,
          required: this.round2Required, released: false,
        });
      default:
        return problem(404, "not-found", "no such route");
    }
  }

  #enroll(body) {
    const invitation = body?.invitation;
    if (invitation === undefined) return problem(401, "invitation-required", "an invitation is required");
    if (!this.invitations.has(invitation)) return problem(403, "invalid-invitation", "not an invitation");
    const used = this.invitations.get(invitation);
    if (used !== null && used !== body.token) return problem(403, "invitation-used", "already used");
    this.invitations.set(invitation, body.token);
    this.tokens.add(body.token);
    return answer(201, { campaign_id: this.id, token: body.token });
  }

  async #submit(round, authorization, body) {
    const token = authorization?.replace(/^Bearer /, "");
    if (!this.tokens.has(token)) return problem(401, "unauthorized", "unknown token");
    if ((round === 1) !== (this.phase === "round1")) return problem(409, "wrong-phase", "not now");
    if (this.submissions[round].has(token)) return problem(409, "already-submitted", "already submitted");
    const p = this.vector.parameters;
    const context = round === 1 ? this.vector.config_hash : this.vector.parameters_hash;
    const info = buildInfo(this.id, round, KEY_CONFIG.key_id, fromHex(context));
    const opened = async (text) => open(PRIVATE_KEY, info, fromBase64url(text));
    const data = round === 2 ? body.data : [];
    if (round === 2 && data.length !== p.messages_per_user) {
      return problem(422, "wrong-submission-size", `${data.length} messages`);
    }
    const record = { token, level: await opened(body.level), data: await Promise.all(data.map(opened)) };
    this.submissions[round].set(token, record);
    return answer(201, { campaign_id: this.id, round, accepted: true });
  }
}

/** The (kind, value) of a 32-byte plaintext. */
export function decodePlaintext(plaintext) {
  return { kind: plaintext[1], value: new DataView(plaintext.buffer, plaintext.byteOffset).getUint32(2) };
}
