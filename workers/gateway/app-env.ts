import type { Env } from "../env.ts";
import type { RequestLog } from "../../src/logging/request-log.ts";
import type { Caller } from "./auth.ts";

/** What the gateway's Hono app knows of a request: its bindings, its id, when it began, and (past the key check) who calls, and its log line when it was sampled. */
export type AppEnv = { Bindings: Env; Variables: { requestId: string; startedAt: number; caller: Caller; log: RequestLog | null } };
