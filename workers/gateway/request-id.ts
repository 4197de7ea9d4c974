/** A client's own request id, when it is one a log line and a header can carry as it is. */
const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** The request's id: the client's `x-request-id` if it sent a sane one, else a new UUID. */
export function requestIdOf(req: Request): string {
  const given = req.headers.get("x-request-id");
  return given && REQUEST_ID.test(given) ? given : crypto.randomUUID();
}
