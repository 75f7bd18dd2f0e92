// What an app written in TypeScript does with the installed package; it must type-check
// against the package's declarations (tests/test_web_package.py), under --strict.

import {
  OfflineError, RefusedError, ServiceUnreachableError, Session, VerificationError, WIRE_PROTOCOL,
  type Parameters, type SavedState, type SessionOptions,
} from "segshuffle-web";

export async function takePart(options: SessionOptions, invitation: string, level: number,
  store: (state: SavedState) => void): Promise<string> {
  const session = new Session({ ...options, onStateChange: store });
  try {
    await session.campaign();
    await session.enroll(invitation);
    const sent = await session.submitLevel(level);
    const parameters: Parameters = await session.fetchParameters();
    const round2 = await session.submitData(["news", 3]);
    return `${WIRE_PROTOCOL} ${sent.reportedLevel} ${parameters.m} ${round2.slots.length}`;
  } catch (error) {
    if (error instanceof OfflineError) return `offline after ${error.waitedMs} ms`;
    if (error instanceof ServiceUnreachableError) return `unreachable: ${error.lastError.message}`;
    if (error instanceof RefusedError) return `refused: ${error.problem} ${error.document?.detail}`;
    if (error instanceof VerificationError) return `check ${error.check}`;
    throw error;
  }
}
