import { env, exports } from "cloudflare:workers";
import { expect, vi } from "vitest";
import type { ResolvedGroup } from "../../src/config/load.ts";
import type { GroupStatus, RouteCall } from "../../src/routing/protocol.ts";
import { loadConfig } from "../../workers/config.ts";

/** Calls the gateway Worker in the Workers runtime, as a client would over HTTP. */
export function gateway(path: string, init: RequestInit = {}, auth = true): Promise<Response> {
  const headers = new Headers(init.headers);
  if (auth && !headers.has("authorization")) headers.set("authorization", `Bearer ${env.KVGATE_MASTER_KEY}`);
  return exports.default.fetch(new Request(`https://kvgate.test${path}`, { ...init, headers }));
}

export interface ChatMessage {
  role: "system" | "user" | "assistant";
  content: string;
}

export function chat(model: string, messages: ChatMessage[], extra: Record<string, unknown> = {}, init: RequestInit = {}): Promise<Response> {
  return gateway("/v1/chat/completions", {
    method: "POST",
    ...init,
    headers: { "content-type": "application/json", ...(init.headers as Record<string, string> | undefined) },
    body: JSON.stringify({ model, messages, max_tokens: 4, ...extra }),
  });
}

export function status(group: string): Promise<GroupStatus> {
  return env.MODEL_GROUP.getByName(group).status();
}

/** A group of the test config, as the gateway Worker resolved it. */
export function groupConfig(name: string): ResolvedGroup {
  const loaded = loadConfig(env);
  const g = loaded.ok ? loaded.config.groups.find((x) => x.name === name) : undefined;
  if (!g) throw new Error(`no group ${name} in the test config`);
  return g;
}

/** A route call as the gateway makes it: its version only. */
export function routeCall(group: ResolvedGroup, chain: number[], extra: Partial<RouteCall> = {}): RouteCall {
  return { version: group.version, chain, released: [], renewed: [], exclude: [], ...extra };
}

/** A route call with the group's config attached, as the gateway sends it to an object that does not know the version. */
export function firstRouteCall(group: ResolvedGroup, chain: number[], extra: Partial<RouteCall> = {}): RouteCall {
  return { ...routeCall(group, chain, extra), group };
}

export const inFlight = async (group: string) => (await status(group)).backends.reduce((n, b) => n + b.inFlight, 0);

/**
 * For a state the gateway reaches on its own (a release, a probe, an alarm): it usually takes
 * milliseconds. The bound only ends a hung test: the upstreams live in the test runner's own Node
 * process, which on a busy shared machine can stall for seconds (a 3 s bound once failed CI so).
 */
export const EVENTUALLY = { timeout: 10_000, interval: 20 } as const;

/** Releases reach the Durable Object a few ms after a response ends; wait for them. */
export async function expectIdle(group: string): Promise<void> {
  await vi.waitFor(async () => expect(await inFlight(group)).toBe(0), EVENTUALLY);
}

/** A conversation whose system prompt is long enough to span many hash blocks. */
export function conversation(topic: string, turns = 1): ChatMessage[] {
  const messages: ChatMessage[] = [{ role: "system", content: `You are the ${topic} expert. `.repeat(60) }];
  for (let t = 0; t < turns; t++) {
    messages.push({ role: "user", content: `Question ${t} about ${topic}?` });
    if (t < turns - 1) messages.push({ role: "assistant", content: `Answer ${t}.` });
  }
  return messages;
}

/** Reads an SSE body into its `data:` payloads. */
export async function sseEvents(res: Response): Promise<string[]> {
  const text = await res.text();
  return text
    .split("\n\n")
    .filter((e) => e.startsWith("data: "))
    .map((e) => e.slice("data: ".length));
}
