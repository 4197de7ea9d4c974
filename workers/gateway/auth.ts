import { unauthorized } from "../../src/openai/errors.ts";
import { subprotocolAuthorization } from "../../src/realtime/handshake.ts";
import type { LoadedConfig } from "../config.ts";
import type { Env } from "../env.ts";

const encoder = new TextEncoder();
let masterDigest: { key: string; digest: Promise<Uint8Array> } | null = null;

async function sha256(text: string): Promise<Uint8Array> {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", encoder.encode(text)));
}

/** Compares digests so neither the key's length nor its bytes shape the time taken. */
function constantTimeEqual(a: Uint8Array, b: Uint8Array): boolean {
  let diff = a.length ^ b.length;
  for (let i = 0; i < a.length; i++) diff |= (a[i] as number) ^ (b[i] ?? 0);
  return diff === 0;
}

/**
 * Throws a 401 unless the request carries the master key. Nothing else about a request lets it
 * in: its Host and Origin headers are the client's (or a proxy's) to write.
 */
export async function authenticate(req: Request, config: LoadedConfig, env: Env): Promise<void> {
  const header = req.headers.get("authorization") ?? subprotocolAuthorization(req.headers);
  if (!header) throw unauthorized("missing API key: send Authorization: Bearer <key>");
  const m = /^Bearer\s+(.+)$/i.exec(header);
  if (!m) throw unauthorized("malformed Authorization header: expected Bearer <key>");
  const key = env[config.auth.masterKeyEnv];
  if (typeof key !== "string" || key === "") {
    // The operator has not set the secret; say so without naming more than the variable.
    throw unauthorized(`the gateway has no master key configured (${config.auth.masterKeyEnv})`);
  }
  if (!masterDigest || masterDigest.key !== key) masterDigest = { key, digest: sha256(key) };
  const [expected, given] = await Promise.all([masterDigest.digest, sha256((m[1] as string).trim())]);
  if (!constantTimeEqual(expected, given)) throw unauthorized("invalid API key");
}
