import { classifyStatus, type Answer } from "../upstream/answer.ts";

export type FailedAnswer = Exclude<Answer, { kind: "success" }>;

const NOT_SERVED: FailedAnswer = { kind: "backend-failure", why: "not-served" };

/**
 * What an upstream's answer to a WebSocket handshake means when it did not switch protocols: a
 * 1xx or 2xx (a plain 200) says the server serves no WebSocket there, as a 404 would; the rest
 * means what it means for any request (src/upstream/answer.ts).
 */
export function classifyRefusedUpgrade(status: number): FailedAnswer {
  const answer = status < 300 ? NOT_SERVED : classifyStatus(status, true);
  return answer.kind === "success" ? NOT_SERVED : answer;
}
