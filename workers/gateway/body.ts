import { badRequest, tooLarge } from "../../src/openai/errors.ts";

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false });

/** Reads a JSON body, refusing more than `limit` bytes without buffering past it. */
export async function readJsonBody(req: Request, limit: number): Promise<unknown> {
  const declared = req.headers.get("content-length");
  if (declared !== null && Number(declared) > limit) throw tooLarge(limit);
  if (!req.body) throw badRequest("request body is empty", null, "invalid_json");
  const reader = req.body.getReader();
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
  let bytes: Uint8Array;
  if (parts.length === 1) bytes = parts[0] as Uint8Array;
  else {
    bytes = new Uint8Array(size);
    let o = 0;
    for (const p of parts) {
      bytes.set(p, o);
      o += p.length;
    }
  }
  let text: string;
  try {
    text = utf8.decode(bytes);
  } catch {
    throw badRequest("request body is not valid UTF-8", null, "invalid_json");
  }
  if (text.trim() === "") throw badRequest("request body is empty", null, "invalid_json");
  try {
    return JSON.parse(text);
  } catch (e) {
    throw badRequest(`request body is not valid JSON: ${(e as Error).message}`, null, "invalid_json");
  }
}
