import { badRequest, tooLarge } from "../../src/openai/errors.ts";
import { concat } from "../../src/stream/bytes.ts";

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false });

/**
 * Deeper than any real request nests (a tool's JSON schema takes a few dozen levels). JSON.parse
 * takes any depth, but serialising the body for the upstream may recurse and overflow the stack:
 * a few kilobytes of brackets would then fail the request after routing, as if the backend had.
 */
export const MAX_JSON_DEPTH = 128;

/** Reads a JSON body, refusing more than `limit` bytes without buffering past it. */
export async function readJsonBody(req: Request, limit: number): Promise<unknown> {
  const declared = req.headers.get("content-length");
  if (declared !== null && Number(declared) > limit) throw tooLarge(limit);
  if (!req.body) throw badRequest("request body is empty", null, "invalid_json");
  // A declared length within the limit is read in one native call; only a chunked body of
  // unknown length is counted as it streams in.
  const bytes = declared !== null ? new Uint8Array(await req.arrayBuffer()) : await readCounted(req.body, limit);
  if (bytes.length > limit) throw tooLarge(limit);
  return parseJson(bytes);
}

async function readCounted(body: ReadableStream<Uint8Array>, limit: number): Promise<Uint8Array> {
  const reader = body.getReader();
  const parts: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.length;
    if (size > limit) {
      await reader.cancel();
      throw tooLarge(limit);
    }
    parts.push(value);
  }
  return parts.length === 1 ? (parts[0] as Uint8Array) : concat(...parts);
}

function parseJson(bytes: Uint8Array): unknown {
  let text: string;
  try {
    text = utf8.decode(bytes);
  } catch {
    throw badRequest("request body is not valid UTF-8", null, "invalid_json");
  }
  if (text.trim() === "") throw badRequest("request body is empty", null, "invalid_json");
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw badRequest(`request body is not valid JSON: ${(e as Error).message}`, null, "invalid_json");
  }
  if (nestsDeeper(value, MAX_JSON_DEPTH)) throw badRequest(`request body nests objects and arrays more than ${MAX_JSON_DEPTH} levels deep`, null, "json_too_deep");
  return value;
}

/** Whether `value` has containers more than `levels` deep; it recurses no deeper than that itself. */
function nestsDeeper(value: unknown, levels: number): boolean {
  if (typeof value !== "object" || value === null) return false;
  if (levels === 0) return true;
  if (Array.isArray(value)) {
    for (const item of value) if (nestsDeeper(item, levels - 1)) return true;
    return false;
  }
  for (const key in value) if (nestsDeeper((value as Record<string, unknown>)[key], levels - 1)) return true;
  return false;
}
