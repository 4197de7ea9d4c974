// @ts-check
/**
 * What both pages share: calls to the gateway (same origin, a bearer key, an OpenAI-style error
 * read into one sentence), the key a person pastes (kept in this tab's sessionStorage only), and a
 * few DOM helpers. Plain browser JavaScript, type-checked by tsc (tsconfig.pages.json).
 */

/** A refused call: the HTTP status and the gateway's own message. */
export class ApiError extends Error {
  /**
   * @param {number} status
   * @param {string} message
   */
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/**
 * How long a page waits with no answer from the gateway (to a key check; to any read of a dashboard
 * refresh) before it says the gateway did not answer: a connection can stay open with nothing on
 * it (a network gone under a laptop), and the browser would wait on it for minutes.
 */
export const READ_TIMEOUT_MS = 10_000;

/**
 * fetch, with its own failure — no answer at all: the gateway stopped, the network gone — said as
 * that, since the browser's words for it ("Failed to fetch", "NetworkError when attempting to fetch
 * resource") name neither the gateway nor what went wrong.
 * @param {string} path
 * @param {RequestInit} init
 * @returns {Promise<Response>}
 */
export async function reach(path, init) {
  try {
    return await fetch(path, init);
  } catch (e) {
    if (e instanceof TypeError) throw new Error(`could not reach the gateway (${e.message})`);
    throw e;
  }
}

/**
 * A body's read that fails as the connection under it goes (fetch's TypeError), said as that.
 * @param {unknown} e
 * @returns {unknown}
 */
export const lostConnection = (e) => (e instanceof TypeError ? new Error(`the connection to the gateway was lost (${e.message})`) : e);

/**
 * Calls the gateway with `key` as the bearer key; the parsed JSON answer, or an ApiError. A
 * `signal` aborted with a "TimeoutError" (AbortSignal.timeout(READ_TIMEOUT_MS), a silence watch)
 * fails it as the gateway not answering.
 * @param {string} key
 * @param {string} path
 * @param {{ method?: string, body?: unknown, signal?: AbortSignal }} [init]
 * @returns {Promise<unknown>}
 */
export async function call(key, path, init = {}) {
  /** @type {Record<string, string>} */
  const headers = { authorization: `Bearer ${key}` };
  if (init.body !== undefined) headers["content-type"] = "application/json";
  try {
    const res = await reach(path, { method: init.method ?? "GET", headers, body: init.body === undefined ? null : JSON.stringify(init.body), signal: init.signal ?? null });
    if (!res.ok) throw await apiError(res);
    return await res.json().catch((e) => {
      throw lostConnection(e);
    });
  } catch (e) {
    if (e instanceof DOMException && e.name === "TimeoutError") throw new Error(`no answer from the gateway in ${READ_TIMEOUT_MS / 1000} s`);
    throw e;
  }
}

/**
 * The gateway's error, read from a refused answer's OpenAI-style body.
 * @param {Response} res
 * @returns {Promise<ApiError>}
 */
export async function apiError(res) {
  let message = res.statusText || "request failed";
  try {
    const body = /** @type {{ error?: { message?: unknown } }} */ (await res.json());
    if (typeof body.error?.message === "string") message = body.error.message;
  } catch {
    // Not JSON: the status says it.
  }
  return new ApiError(res.status, `${res.status}: ${message}`);
}

/**
 * `answer` if it is a list as the gateway lists things (`data`, each item with a string `field`),
 * else a failure saying `path` answered none: a key check passed by a JSON 200 of something in front
 * of the gateway (a proxy's `{"ok":true}`, a sign-in page's) kept the key, and the page failed on
 * reading the answer later.
 * @param {unknown} answer
 * @param {string} field
 * @param {string} path
 * @param {string} what
 * @returns {unknown}
 */
export function listAnswer(answer, field, path, what) {
  const data = typeof answer === "object" && answer !== null && "data" in answer ? answer.data : null;
  const isItem = (/** @type {unknown} */ item) => typeof item === "object" && item !== null && typeof (/** @type {Record<string, unknown>} */ (item))[field] === "string";
  if (!Array.isArray(data) || !data.every(isItem)) throw new Error(`${path} answered with no ${what} (something other than the gateway may answer at this address)`);
  return answer;
}

/** The gateway refused the key itself, not the request: a key to forget. */
export const refusesKey = (/** @type {unknown} */ e) => e instanceof ApiError && (e.status === 401 || e.status === 403);

/**
 * The key form of a page: a password field whose value stays in this tab (sessionStorage, which
 * the browser may save to disk and restore with the tab) and a "Forget key" button. `check` asks the gateway with the key, on submit
 * and on load when one is kept; once it answers, `use` is given the key with the answer and the
 * key is kept (the page's loading goes on from there, unawaited: a key kept only after the page's
 * whole first load was lost to a reload meanwhile). A refusal (`check` or `use` throws) shows why in
 * `status`, and forgets the key when the gateway refused the key itself (401, 403): a kept key
 * outlives a gateway down for a moment. A key typed over the one in use that fails leaves the one
 * in use, kept and shown: a typo would have taken the live view (and a streaming reply) with it.
 * A check overtaken (Forget key, or another key sent, while
 * it ran) keeps nothing and uses nothing: its key would come back after the Forget. The page calls
 * the returned `failed` when the key in use fails later (refused mid-session).
 * @template T
 * @param {{ form: HTMLFormElement, input: HTMLInputElement, forget: HTMLButtonElement, status: HTMLElement, storageName: string, check: (key: string) => Promise<T>, use: (key: string, answer: T) => void, dropped: () => void }} o
 * @returns {{ failed: (key: string, e: unknown) => void }}
 */
export function keyForm(o) {
  const kept = sessionStorage.getItem(o.storageName);
  /** Bumped by each check and each Forget: a check that answers after either is overtaken. */
  let attempt = 0;
  /** The key given to `use` and not dropped since: the one the page shows. */
  /** @type {string | null} */
  let inUse = null;
  const failed = (/** @type {string} */ key, /** @type {unknown} */ e) => {
    const why = e instanceof Error ? e.message : String(e);
    if (inUse !== null && inUse !== key) return say(o.status, `${why} (the key in use is unchanged)`, true);
    if (refusesKey(e) && sessionStorage.getItem(o.storageName) === key) sessionStorage.removeItem(o.storageName);
    inUse = null;
    o.dropped();
    // Said of the key tried, which is kept only if it was the one the tab kept.
    const keptThis = sessionStorage.getItem(o.storageName) === key;
    o.forget.hidden = sessionStorage.getItem(o.storageName) === null;
    say(o.status, keptThis ? `${why} (the key is kept: reload the page to try again)` : why, true);
  };
  const start = async (/** @type {string} */ key) => {
    const mine = ++attempt;
    say(o.status, "Checking the key…");
    /** @type {T} */
    let answer;
    try {
      answer = await o.check(key);
    } catch (e) {
      if (mine === attempt) failed(key, e);
      return;
    }
    if (mine !== attempt) return;
    // A use that throws fails as a check that throws: run after the key was kept, it left the key
    // kept, "Checking the key…" on screen and the page unusable.
    try {
      inUse = key;
      o.use(key, answer);
    } catch (e) {
      failed(key, e);
      return;
    }
    sessionStorage.setItem(o.storageName, key);
    o.input.value = "";
    o.forget.hidden = false;
  };
  o.form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const key = o.input.value.trim();
    if (!key) return;
    // The browser refuses such a key as a header before anything is sent, in words ("Failed to
    // fetch") that would read as a gateway out of reach.
    const bad = key.match(/[^\x21-\x7e]/u);
    if (bad) return say(o.status, `the key holds a character no HTTP header can carry (${JSON.stringify(bad[0])} at position ${(bad.index ?? 0) + 1}): paste it again as it was issued`, true);
    void start(key);
  });
  o.forget.addEventListener("click", () => {
    attempt++;
    sessionStorage.removeItem(o.storageName);
    o.forget.hidden = true;
    inUse = null;
    o.dropped();
    say(o.status, "Key forgotten.");
    o.input.focus();
  });
  if (kept) void start(kept);
  return { failed };
}

/**
 * Writes a status line; an error is marked so that styling (and a reader) can tell.
 * @param {HTMLElement} where
 * @param {string} text
 * @param {boolean} [error]
 */
export function say(where, text, error = false) {
  where.textContent = text;
  where.classList.toggle("error", error);
}

/**
 * An element with attributes and children, built without HTML strings: nothing the gateway
 * answers (a key's name, a model id) is ever parsed as markup.
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag
 * @param {Record<string, string>} [attrs]
 * @param {(Node | string)[]} children
 * @returns {HTMLElementTagNameMap[K]}
 */
export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) e.setAttribute(name, value);
  e.append(...children);
  return e;
}

/**
 * The element with this id, or a clear failure: the page and its script disagree.
 * @template {HTMLElement} T
 * @param {string} id
 * @param {new () => T} type
 * @returns {T}
 */
export function byId(id, type) {
  const e = document.getElementById(id);
  if (!(e instanceof type)) throw new Error(`the page has no ${type.name} #${id}`);
  return e;
}
