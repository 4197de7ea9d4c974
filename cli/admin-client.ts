import { unreachableHost } from "../src/config/private-hosts.ts";
import { printable } from "../src/control-characters.ts";
import { fetchBlockedPort } from "../src/fetch-blocked-ports.ts";
import { asFetchSends, HEADER_BREAK } from "../src/header-value.ts";
import { CliError } from "./cli-error.ts";

export const DEFAULT_URL = "http://127.0.0.1:8787";

/** How long a call waits for the gateway's whole answer. */
export const ANSWER_TIMEOUT_MS = 30_000;

/** The gateway's admin API, as the CLI reaches it: KVGATE_URL and KVGATE_ADMIN_KEY from the environment. */
export interface AdminClient {
  url: string;
  call<T>(method: "GET", path: string): Promise<T>;
  /**
   * A change. `readBack` is the command that shows whether it was made (`npx kvgate keys show ID`),
   * named when its answer does not come: it may have been made, and sent again it would be made twice.
   */
  call<T>(method: "POST" | "PATCH" | "PUT" | "DELETE", path: string, body: unknown, readBack: string): Promise<T>;
}

/** An OpenAI-style error body, as the gateway writes it. */
interface ErrorBody {
  error?: { message?: unknown; param?: unknown };
}

export function adminClient(env: NodeJS.ProcessEnv, fetchImpl: typeof fetch = fetch, answerTimeoutMs = ANSWER_TIMEOUT_MS): AdminClient {
  const url = (env.KVGATE_URL || DEFAULT_URL).replace(/\/+$/, "");
  // Before anything repeats the URL: fetch refuses one with credentials, and its error and ours would print the password.
  const parsed = URL.parse(url);
  if (parsed && (parsed.username !== "" || parsed.password !== "")) throw new CliError("KVGATE_URL must not carry credentials (user:password@): the admin key goes in KVGATE_ADMIN_KEY", 2);
  if (!parsed || !/^https?:$/.test(parsed.protocol)) throw new CliError(`KVGATE_URL must be an http(s) URL, not "${unlessUserinfo(url)}"`, 2);
  // Every command sends the admin key, which opens the whole fleet and every key: never in
  // cleartext over the internet (the gateway holds its upstreams' secrets to the same rule). On
  // this machine or a private network, plain http is the operator's call.
  // A LAN name public DNS would not know (kvgate.lan, a company's internal zone) looks public by
  // its name alone: KVGATE_ALLOW_PLAIN_HTTP=1 says the network is the operator's.
  if (parsed.protocol === "http:" && unreachableHost(parsed.hostname) === null && env.KVGATE_ALLOW_PLAIN_HTTP !== "1") {
    throw new CliError(`KVGATE_URL is plain http to a public host (${parsed.hostname}): the admin key would cross the internet in cleartext; use https://${parsed.host} (or, for a private network's name, KVGATE_ALLOW_PLAIN_HTTP=1)`, 2);
  }
  // fetch refuses these ports without connecting: the CLI could never reach a gateway there.
  const blocked = parsed.port === "" ? null : fetchBlockedPort(Number(parsed.port));
  if (blocked !== null) throw new CliError(`KVGATE_URL: ${blocked}; serve the gateway on another port`, 2);
  const key = asFetchSends(env.KVGATE_ADMIN_KEY ?? "");
  return {
    url,
    async call<T>(method: string, path: string, body?: unknown, readBack?: string): Promise<T> {
      if (!key) throw new CliError("KVGATE_ADMIN_KEY is not set: export the gateway's admin key (npm start prints it on a line of its own)", 2);
      if (unsendable(key)) throw new CliError("KVGATE_ADMIN_KEY holds a character no HTTP header may (a line break, a NUL, or one past U+00FF such as a curly quote): export the admin key alone, as npm start prints it", 2);
      // Covers the answer's body too: a gateway that sends its headers and then stalls is waited on no longer.
      const signal = AbortSignal.timeout(answerTimeoutMs);
      /** The call failed after it may have reached the gateway: a change may have been made. */
      const unsure = (what: string) => {
        const line = `${method} ${path}: ${what}`;
        return new CliError(readBack === undefined ? line : `${line}; the change may have been made: read it back (${readBack}) before sending it again`, 1, true);
      };
      const late = () => unsure(`no answer within ${answerTimeoutMs / 1000} s`);
      let res: Response;
      try {
        res = await fetchImpl(url + path, {
          method,
          headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
          body: body === undefined ? undefined : JSON.stringify(body),
          signal,
        });
      } catch (e) {
        // Out of time, the request was most likely sent (a connection not made fails sooner, on its
        // own error): saying the gateway was not reached would have the operator make the change twice.
        if (signal.aborted) throw late();
        const why = withoutKey(reason(e), key);
        if (beforeSending(why)) throw new CliError(`cannot reach the gateway at ${url} (${why}); is it running, and is KVGATE_URL right?`, 1, true);
        // Closed or reset once the request went out (wrangler dev reloading under it, a load balancer): it may have been taken.
        throw unsure(`the connection closed before the answer (${why})`);
      }
      let text: string;
      try {
        text = await res.text();
      } catch (e) {
        // The connection broke (or the time ran out) halfway through the answer: a change may have been made.
        throw signal.aborted ? late() : unsure(`the answer broke off (${withoutKey(reason(e), key)})`);
      }
      let parsed: unknown = undefined;
      try {
        parsed = text === "" ? undefined : JSON.parse(text);
      } catch {
        // Not JSON: said below with the status.
      }
      // Every line is one printable line (the README's "a failure is one line on stderr"): a
      // message is written out as a table's values are, and a page that is not JSON — a proxy's
      // HTML 502, its CRLFs and escape sequences — is not repeated at all.
      const passing = res.status === 502 || res.status === 503 || res.status === 504;
      if (!res.ok) {
        const err = (parsed as ErrorBody | undefined)?.error;
        if (typeof err?.message === "string") throw new CliError(`${method} ${path}: ${res.status} ${printable(err.message)}`, 1, passing);
      }
      if (parsed === undefined || !res.ok) throw new CliError(`${method} ${path}: answered ${printable(`${res.status} ${res.statusText}`.trim())}, not JSON: is KVGATE_URL a kvgate gateway?`, 1, passing);
      return parsed as T;
    },
  };
}

/**
 * A URL that did not parse is repeated only after its last "@": URL.parse found no credentials in
 * it, yet `ops:pw@host` (no scheme) or a password before a host with a typo still carries one.
 */
function unlessUserinfo(url: string): string {
  const at = url.lastIndexOf("@");
  return at < 0 ? url : `…${url.slice(at)}`;
}

/**
 * A connection that was never made, so nothing was sent: no such host, nothing listening, no
 * route, no connection in time, a TLS handshake refused (its codes name a certificate, SSL or
 * TLS), or a port fetch will not connect to ("bad port": src/fetch-blocked-ports.ts, should Node's
 * list hold one ours lacks). Any other failure (UND_ERR_SOCKET, ECONNRESET) came once the request
 * may have gone out.
 */
const CONNECT_FAILURES = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH", "ENETDOWN", "EADDRNOTAVAIL", "UND_ERR_CONNECT_TIMEOUT", "bad port"]);

function beforeSending(reason: string): boolean {
  return CONNECT_FAILURES.has(reason) || /CERT|SSL|TLS|SIGNATURE|ISSUER/.test(reason);
}

/** A header value Node's fetch cannot send: a line break or NUL, or a character past U+00FF (not a byte; its error names no value). */
function unsendable(value: string): boolean {
  return HEADER_BREAK.test(value) || /[^\u0000-\u00ff]/.test(value);
}

/**
 * A fetch error's reason as one line that does not hold the admin key: a message of fetch's own
 * may quote a header it refused, and would be written to stderr, which CI logs keep.
 */
function withoutKey(why: string, key: string): string {
  return printable(key === "" ? why : why.replaceAll(key, "<KVGATE_ADMIN_KEY>"));
}

function reason(e: unknown): string {
  const cause = (e as { cause?: { code?: unknown; message?: unknown } }).cause;
  if (typeof cause?.code === "string") return cause.code;
  if (typeof cause?.message === "string") return cause.message;
  return e instanceof Error ? e.message : String(e);
}
