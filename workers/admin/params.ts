import { badRequest } from "../../src/openai/errors.ts";
import { isRecord } from "../../src/fleet/merge-patch.ts";

/**
 * What an admin route reads of a request is all it may be sent: a field or query parameter it does
 * not read is refused, naming it, rather than left out. A revision sent as `revision` (or a `?force=1`)
 * left out made a change without the check it asked for.
 */

/** The query's parameters, once each is one `what` takes. */
export function queryParams(url: string, names: readonly string[], what: string): URLSearchParams {
  const params = new URL(url).searchParams;
  for (const name of params.keys()) {
    if (!names.includes(name)) throw badRequest(`unknown query parameter "${name}"; ${what} takes ${names.join(", ")}`, name, "invalid_value");
  }
  return params;
}

/**
 * A change (POST, PUT, PATCH) takes no query parameter: what it changes, and the revision it was
 * decided at (`rev`), go in its JSON body. A DELETE, which reads no body (noBody), reads its own (queryRev).
 * A PATCH sent with `?rev=N`, as a DELETE sends it, was made with no check at all, over whatever
 * another operator had changed since revision N.
 */
export function noQuery(url: string, what: string): void {
  const name = new URL(url).searchParams.keys().next().value;
  if (name !== undefined) throw badRequest(`unknown query parameter "${name}"; ${what} takes none: its fields, a revision ("rev") among them, go in its JSON body`, name, "invalid_value");
}

/**
 * What a route that reads no body may be sent: none, a blank one or `{}`. A DELETE, a drain, an
 * enable or a disable discarded theirs unread, so a DELETE carrying `{"rev": 12}`, as a PATCH
 * carries it, deleted with no check over another operator's change. `instead` says where what it
 * carries goes.
 */
export function noBody(body: unknown, what: string, instead: string): void {
  if (body === undefined || (isRecord(body) && Object.keys(body).length === 0)) return;
  const name = isRecord(body) ? Object.keys(body)[0] : undefined;
  const takes = `${what} takes no body: ${instead}`;
  throw badRequest(name === undefined ? takes : `unknown field "${name}"; ${takes}`, name ?? null, "invalid_value");
}

/** `body`'s fields, once each is one `what` takes; a body that is no object is left for the route's own check to refuse. */
export function bodyFields(body: unknown, names: readonly string[], what: string): Record<string, unknown> {
  if (!isRecord(body)) return {};
  for (const name of Object.keys(body)) {
    if (!names.includes(name)) throw badRequest(`unknown field "${name}"; ${what} takes ${names.join(", ")}`, name, "invalid_value");
  }
  return body;
}
