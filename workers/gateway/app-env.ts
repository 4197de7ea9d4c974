import type { Env } from "../env.ts";

/** What the gateway's Hono app knows of a request: its bindings, its id and when it began. */
export type AppEnv = { Bindings: Env; Variables: { requestId: string; startedAt: number } };
