import { KEY_MARKER } from "../../src/tenants/key-format.ts";
import type { Caller } from "./auth.ts";

/** A client's own request id, when it is one a log line and a header can carry as it is. */
const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/**
 * The request's id: the client's `x-request-id` if it sent a sane one, else a new UUID. Not a
 * virtual key (one pasted there): the id is logged, and sent to the engine, as it is.
 */
export function requestIdOf(req: Request): string {
  const given = req.headers.get("x-request-id");
  return given && REQUEST_ID.test(given) && !given.includes(KEY_MARKER) ? given : crypto.randomUUID();
}

/**
 * The id an engine is sent for the request, as its `x-request-id`. vLLM takes that header as the
 * engine's own request id (`chatcmpl-<id>`), tracks the request by it and aborts it by it when its
 * client leaves; the request's id may be the client's own, chosen by it, and so one another tenant
 * can send too (a predictable id it chose). A virtual key's therefore goes under the key's id, as
 * `<key id>:<id>`: a key's id (`key_` and 16 hex digits) holds no `:`, so the first one ends it and
 * no other key's request can reach the engine as the same id. Its client still reads its own id
 * back (x-request-id), and the log line carries that. The master key's goes as it is: the operator
 * owns the deployment, and its ids are its own to choose.
 */
export function engineRequestId(requestId: string, caller: Caller): string {
  return caller.kind === "master" ? requestId : `${caller.key.record.id}:${requestId}`;
}
