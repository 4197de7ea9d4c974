// @ts-check
/**
 * /dashboard: every group's backends, and the routing decisions of the groups in view, refreshed
 * each second from the admin API, with the registry's drain and enable; the virtual keys, their
 * revocation and usage. Every number comes from an admin call made with the key the person gave:
 * without it the page is empty. Rows are updated in place, never rebuilt, so a focused button
 * keeps its focus across refreshes.
 */
import { ApiError, byId, call, el, keyForm, listAnswer, READ_TIMEOUT_MS, refusesKey, say } from "../shared/api.js";

/** @typedef {import("../../src/fleet/admin-api.ts").FleetStatus} FleetStatus */
/** @typedef {import("../../src/fleet/admin-api.ts").StatusGroup} StatusGroup */
/** @typedef {import("../../src/tenants/admin-api.ts").KeyList} KeyList */
/** @typedef {import("../../src/tenants/admin-api.ts").KeyView} KeyView */
/** @typedef {import("../../src/tenants/admin-api.ts").UsageView} UsageView */
/**
 * One routing decision, as GET /admin/v1/groups/:group/decisions lists them, newest first.
 * @typedef {{ at: string | number, backend: string, reason: string, matched: number, total: number, outcome: string | null, ttft_ms: number | null }} Decision
 */
/**
 * @typedef {{ section: HTMLElement, summary: HTMLElement, tbody: HTMLTableSectionElement, rows: Map<string, HTMLTableRowElement>, decisions: HTMLElement, drawn: string }} GroupView
 */

const REFRESH_MS = 1000;
/** Decisions shown per group: the endpoint keeps 100, a screen holds fewer. */
const DECISIONS_SHOWN = 20;
const REFRESH_FAILED = "Refresh failed:";
const DEPLOYMENT_FIELDS = ["state", "inFlight", "breaker", "prefixBlocks", "ttft", "cached"];

const status = byId("status", HTMLElement);
const live = byId("live", HTMLElement);
const groupsBox = byId("groups", HTMLElement);
const updated = byId("updated", HTMLElement);
const keysBody = /** @type {HTMLTableSectionElement} */ (byId("keys", HTMLTableElement).tBodies[0]);
const usageBox = byId("usage", HTMLElement);

/** @type {string | null} */
let adminKey = null;
/** Bumped when the key changes: a refresh of an older key leaves the page alone. */
let generation = 0;
/**
 * Bumped when a key is taken or dropped, not when the refresh loop starts again (a tab shown
 * again): a key table or usage read of the key before draws nothing on a page that has no key.
 */
let keyGeneration = 0;
/** @type {ReturnType<typeof setTimeout> | undefined} */
let timer;
/** @type {Map<string, GroupView>} */
const groupViews = new Map();

/**
 * A read is bounded (`signal`, else READ_TIMEOUT_MS of its own). A change (a POST) is not: given
 * up on, it may still be made, and the page could only say it failed.
 * @param {string} path @param {{ method?: string, body?: unknown, signal?: AbortSignal }} [init]
 */
function admin(path, init = {}) {
  if (adminKey === null) return Promise.reject(new Error("no admin key"));
  const read = init.method === undefined || init.method === "GET";
  return call(adminKey, `/admin/v1${path}`, read ? { ...init, signal: init.signal ?? AbortSignal.timeout(READ_TIMEOUT_MS) } : init);
}

/**
 * A refresh's watch: its signal aborts as a timeout once READ_TIMEOUT_MS pass with none of its
 * reads answered. Not a bound on each read: a refresh sends its groups' decisions reads at once,
 * and behind the browser's six connections to the gateway (HTTP/1.1, as under `npm start`) the
 * last may wait their turn for longer than that while the gateway answers all along.
 */
function silenceWatch() {
  const controller = new AbortController();
  /** @type {ReturnType<typeof setTimeout> | undefined} */
  let t;
  const answered = () => {
    if (controller.signal.aborted) return;
    clearTimeout(t);
    t = setTimeout(() => controller.abort(new DOMException("no answer", "TimeoutError")), READ_TIMEOUT_MS);
  };
  answered();
  return {
    signal: controller.signal,
    answered,
    /** The refresh is over: the reads it no longer waits for (one failed) are let go. */
    end() {
      clearTimeout(t);
      controller.abort();
    },
  };
}

const enc = encodeURIComponent;
const message = (/** @type {unknown} */ e) => (e instanceof Error ? e.message : String(e));

const form = keyForm({
  form: byId("key-form", HTMLFormElement),
  input: byId("admin-key", HTMLInputElement),
  forget: byId("forget-key", HTMLButtonElement),
  status,
  storageName: "kvgate.adminKey",
  // A read of the registry only: GET /admin/v1/status asks every group's routing objects, which a
  // fresh gateway of a thousand groups wakes in seconds (past the 10 s, at times), and the first
  // refresh reads it anyway.
  check: async (key) => listAnswer(await call(key, "/admin/v1/groups", { signal: AbortSignal.timeout(READ_TIMEOUT_MS) }), "name", "/admin/v1/groups", "group list"),
  use(key) {
    adminKey = key;
    keyGeneration++;
    const gen = ++generation;
    live.hidden = false;
    say(status, "Admin key accepted.");
    void refresh(gen);
    void loadKeys();
  },
  dropped() {
    adminKey = null;
    generation++;
    keyGeneration++;
    clearTimeout(timer);
    live.hidden = true;
    groupsBox.replaceChildren();
    groupViews.clear();
    keysBody.replaceChildren();
    listing.after = null;
    moreKeys.hidden = true;
    revokedHere.clear();
    usageBox.hidden = true;
  },
});

/**
 * Reads a refresh has out at once: one a group in view, which a screen zoomed far out may show
 * many of. All sent together, a few hundred are more than Chromium takes from a page ("Failed to
 * fetch"); the browser's connections to the gateway (6 on HTTP/1.1) take fewer still, and on
 * HTTP/2 this many keep a refresh short.
 */
const READS_AT_ONCE = 32;

/** `fn` run with at most `n` of them under way, the others waiting their turn in order. */
function limited(/** @type {number} */ n) {
  let running = 0;
  /** @type {(() => void)[]} */
  const waiting = [];
  /** @template T @param {() => Promise<T>} fn @returns {Promise<T>} */
  return (fn) =>
    new Promise((resolve, reject) => {
      const run = () => {
        running++;
        fn()
          .then(resolve, reject)
          .finally(() => {
            running--;
            waiting.shift()?.();
          });
      };
      if (running < n) run();
      else waiting.push(run);
    });
}

/** @param {number} gen */
async function refresh(gen) {
  const watch = silenceWatch();
  const turn = limited(READS_AT_ONCE);
  /** @type {(path: string) => Promise<unknown>} */
  const read = (path) => turn(() => admin(path, { signal: watch.signal }).finally(watch.answered));
  try {
    // Every group's backends come in this one read, whatever the fleet's size; decisions are a read
    // a group, made only for the groups on screen: two reads a group made a refresh of a thousand
    // groups take 15 s and more.
    const fleet = /** @type {FleetStatus} */ (await read("/status"));
    if (gen !== generation) return;
    const listed = new Set(fleet.groups.map((g) => g.name));
    for (const [name, view] of groupViews) {
      if (!listed.has(name)) {
        view.section.remove();
        groupViews.delete(name);
      }
    }
    for (const g of fleet.groups) renderGroup(g);
    const shown = [...groupViews].filter(([, view]) => inView(view.section));
    const decisions = await Promise.all(shown.map(([name]) => recentDecisions(name, read)));
    if (gen !== generation) return;
    for (const [i, [, view]] of shown.entries()) renderDecisions(view, /** @type {Decision[] | ApiError} */ (decisions[i]));
    updated.textContent = `Last update: ${new Date().toLocaleTimeString()}.`;
    // A refresh that failed is over once one succeeds; anything said since stays.
    if (status.textContent?.startsWith(REFRESH_FAILED)) say(status, "");
  } catch (e) {
    if (gen !== generation) return;
    // A key refused now (rotated since it was typed) goes, as one refused when typed does: its view with it.
    if (refusesKey(e) && adminKey !== null) return form.failed(adminKey, e);
    // The same failure again is no news: the status line is a live region, read out at each rewrite.
    const failed = `${REFRESH_FAILED} ${message(e)}`;
    if (status.textContent !== failed) say(status, failed, true);
  } finally {
    watch.end();
  }
  // A tab in the background asks nothing: the browser would go on refreshing every second for
  // minutes before it throttles the timer, each time the gateway asking every group's routing objects.
  if (!document.hidden) timer = setTimeout(() => void refresh(gen), REFRESH_MS);
}

document.addEventListener("visibilitychange", () => {
  if (document.hidden || adminKey === null) return;
  // Shown again: numbers now, not a second later. A new generation, so that a refresh still under
  // way from before ends without scheduling a second loop beside this one.
  clearTimeout(timer);
  void refresh(++generation);
});

/** Some of the element is within the window: the operator may be looking at it. */
function inView(/** @type {HTMLElement} */ e) {
  const r = e.getBoundingClientRect();
  return r.bottom > 0 && r.top < window.innerHeight && r.height > 0;
}

/**
 * The group's recent decisions, or the gateway's refusal (its routing object unreachable, say):
 * the rest of the group's view still shows.
 * @param {string} group
 * @param {(path: string) => Promise<unknown>} read
 * @returns {Promise<Decision[] | ApiError>}
 */
async function recentDecisions(group, read) {
  try {
    const list = /** @type {{ data: Decision[] }} */ (await read(`/groups/${enc(group)}/decisions`));
    return list.data;
  } catch (e) {
    if (e instanceof ApiError) return e;
    throw e;
  }
}

/** @param {StatusGroup} g */
function renderGroup(g) {
  const rows = g.deploymentRows;
  const view = groupViews.get(g.name) ?? newGroupView(g.name);
  set(view.summary, `Registry revision ${g.rev} (routing object: ${g.routingRev ?? "unreachable"}) · ${g.takingRequests} of ${g.deployments} deployments take requests · ${g.inFlight === null ? "in flight unknown" : `${g.inFlight} in flight`}`);
  for (const [id, tr] of view.rows) {
    if (!rows.some((r) => r.id === id)) {
      tr.remove();
      view.rows.delete(id);
    }
  }
  for (const r of rows) {
    const tr = view.rows.get(r.id) ?? newDeploymentRow(view, g.name, r.id);
    const cells = cellsOf(tr);
    // A registered server its group routes nothing (the group closed to registration, or its binding not listed) keeps its state: say why it gets no traffic.
    set(cells.state, r.state + (r.unrouted ? ` (${r.unrouted})` : "") + (r.state !== "active" && r.drained ? " (drained)" : ""));
    set(cells.inFlight, `${r.inFlight ?? "–"} / ${r.maxInFlight}`);
    // A backend resting after a 429 takes requests only when no other has room: a state of its own to see.
    set(cells.breaker, (r.breaker ?? "–") + (r.restingUntil ? ` · resting after a 429 until ${new Date(r.restingUntil).toLocaleTimeString()}` : ""));
    set(cells.prefixBlocks, r.prefixBlocks === null ? "–" : `${r.prefixBlocks} / ${r.prefixCapacity}`);
    set(cells.ttft, r.ttftEwmaMs === null ? "–" : `${Math.round(r.ttftEwmaMs)} ms`);
    // Only requests whose usage the gateway read count: none on the master key's fast path.
    set(cells.cached, !r.promptTokens ? "–" : `${Math.round((100 * (r.cachedTokens ?? 0)) / r.promptTokens)} % of ${r.promptTokens}`);
  }
}

/** Numbers the groups' headings: aria-labelledby reads a list of ids split at spaces, and a group's name may hold some. */
let headings = 0;

/** @param {string} name @returns {GroupView} */
function newGroupView(name) {
  const titleId = `group-title-${++headings}`;
  const summary = el("p");
  const tbody = el("tbody");
  const table = el(
    "table",
    { class: "deployments" },
    el("caption", {}, `Backends of ${name}`),
    el("thead", {}, el("tr", {}, ...["Deployment", "State", "In flight / max", "Breaker", "Prefix blocks / capacity", "TTFT (EWMA)", "Cached tokens", "Actions"].map((h) => el("th", { scope: "col" }, h)))),
    tbody,
  );
  const decisions = el("div", { class: "decisions scroll" }, el("p", {}, "Read once the group is in view."));
  const section = el("section", { "aria-labelledby": titleId, "data-group": name }, el("h2", { id: titleId }, `Group ${name}`), summary, el("div", { class: "scroll" }, table), el("h3", {}, "Recent routing decisions"), decisions);
  groupsBox.append(section);
  /** @type {GroupView} */
  const view = { section, summary, tbody, rows: new Map(), decisions, drawn: "" };
  groupViews.set(name, view);
  return view;
}

/**
 * @param {GroupView} view
 * @param {string} group
 * @param {string} id
 */
function newDeploymentRow(view, group, id) {
  const tr = el("tr", { "data-deployment": id }, el("th", { scope: "row" }, id), ...DEPLOYMENT_FIELDS.map((f) => el("td", { "data-field": f })));
  const actions = el("td", { class: "actions" });
  for (const [verb, label] of /** @type {const} */ ([["drain", "Drain"], ["enable", "Enable"]])) {
    const button = el("button", { type: "button", "aria-label": `${label} ${id}` }, label);
    button.addEventListener("click", () => void setState(group, id, verb));
    actions.append(button, " ");
  }
  tr.append(actions);
  view.tbody.append(tr);
  view.rows.set(id, tr);
  return tr;
}

/** @param {HTMLTableRowElement} tr */
function cellsOf(tr) {
  /** @type {Record<string, HTMLElement>} */
  const cells = {};
  for (const f of DEPLOYMENT_FIELDS) {
    const td = tr.querySelector(`[data-field="${f}"]`);
    if (td instanceof HTMLElement) cells[f] = td;
  }
  return /** @type {Record<"state" | "inFlight" | "breaker" | "prefixBlocks" | "ttft" | "cached", HTMLElement>} */ (cells);
}

/** Text changes only where it differs: no needless work for the browser, nothing for a screen reader to re-read. */
function set(/** @type {HTMLElement} */ e, /** @type {string} */ text) {
  if (e.textContent !== text) e.textContent = text;
}

/**
 * @param {string} group
 * @param {string} id
 * @param {"drain" | "enable"} verb
 */
async function setState(group, id, verb) {
  try {
    const r = /** @type {{ routing?: string }} */ (await admin(`/groups/${enc(group)}/deployments/${enc(id)}/${verb}`, { method: "POST" }));
    say(status, `${id}: ${verb === "drain" ? "draining, no new requests" : "active"} (routing ${r.routing ?? "updated"}).`);
  } catch (e) {
    say(status, `${verb} ${id} failed: ${message(e)}`, true);
  }
}

/**
 * @param {GroupView} view
 * @param {Decision[] | ApiError} decisions
 */
function renderDecisions(view, decisions) {
  if (decisions instanceof ApiError) {
    view.decisions.replaceChildren(el("p", {}, `Decisions unavailable: ${decisions.message}`));
    view.drawn = "";
    return;
  }
  // A decision's outcome and TTFT are filled in where it stands, after it was made: what is shown
  // changes with them, not only with a newer decision.
  const shown = decisions.slice(0, DECISIONS_SHOWN);
  const drawn = `${decisions.length}:${JSON.stringify(shown)}`;
  if (drawn === view.drawn) return;
  view.drawn = drawn;
  if (decisions.length === 0) {
    view.decisions.replaceChildren(el("p", {}, "No request routed yet."));
    return;
  }
  const head = el("tr", {}, ...["Time", "Backend", "Reason", "Matched / total blocks", "Outcome", "TTFT"].map((h) => el("th", { scope: "col" }, h)));
  const rows = shown.map((d) =>
    el(
      "tr",
      { "data-reason": d.reason },
      el("td", {}, new Date(d.at).toLocaleTimeString()),
      el("td", {}, d.backend),
      el("td", {}, d.reason),
      el("td", {}, `${d.matched} / ${d.total}`),
      el("td", {}, d.outcome ?? "in flight"),
      el("td", {}, d.ttft_ms === null ? "–" : `${Math.round(d.ttft_ms)} ms`),
    ),
  );
  view.decisions.replaceChildren(el("table", {}, el("caption", {}, `The last ${rows.length} of ${decisions.length}, newest first`), el("thead", {}, head), el("tbody", {}, ...rows)));
}

/**
 * Which keys the table lists: one status, asked of the API (so thousands of revoked keys are not
 * read for the few active ones; active unless the operator chooses), or all.
 */
const keyStatus = byId("key-status", HTMLSelectElement);
const moreKeys = byId("more-keys", HTMLButtonElement);
byId("refresh-keys", HTMLButtonElement).addEventListener("click", () => void loadKeys());
keyStatus.addEventListener("change", () => void loadKeys());
moreKeys.addEventListener("click", () => void loadMoreKeys());

/**
 * The table's listing: a page of keys at a time, the next when the operator asks for it (More
 * keys). Read whole at each open and each revoke, 10,000 keys were 100 reads one after another and
 * 10,000 rows before the table showed. `n` is bumped at each new listing: a page read for the one
 * before draws nothing. `status` and `after` are the drawn listing's: the keys it shows, and where
 * its next page starts (null: none, or a new listing's first page still out, which More keys must
 * not page on from the rows before). `reading`: the `n` of the listing whose next page is being
 * read (0, none), so that a More read of the listing before, still out, holds back no other.
 * @type {{ n: number, status: string, after: string | null, reading: number }}
 */
const listing = { n: 0, status: "", after: null, reading: 0 };

/**
 * The keys revoked from this page, as their revokes answered. A listing read before a revoke and
 * answered after it says the key active: drawn as it says, the key came back with a Revoke button.
 * A revoke is for good, so its answer stands over any listing's that says otherwise.
 * @type {Map<string, KeyView>}
 */
const revokedHere = new Map();

/** A key's row, as a listing read it unless a revoke from this page answered since. */
const listedRow = (/** @type {KeyView} */ k) => keyRow(k.status === "revoked" ? k : (revokedHere.get(k.id) ?? k));

/** A page of keys of `status` (all for ""), after the key `after`, oldest first. */
function readKeys(/** @type {string} */ status, /** @type {string | null} */ after) {
  const q = new URLSearchParams();
  if (status) q.set("status", status);
  if (after) q.set("after", after);
  return /** @type {Promise<KeyList>} */ (admin(`/keys${q.size > 0 ? `?${q}` : ""}`));
}

/** Where the next page starts, and the More keys button while there is one. */
function keysFollow(/** @type {KeyList} */ page) {
  listing.after = page.has_more ? page.last_id : null;
  moreKeys.hidden = listing.after === null;
}

async function loadKeys() {
  const gen = keyGeneration;
  const n = ++listing.n;
  const shown = keyStatus.value;
  // No More keys until this listing's first page is drawn: it would page on the rows before,
  // another choice's maybe, and add them to this one's.
  listing.after = null;
  moreKeys.hidden = true;
  try {
    const page = await readKeys(shown, null);
    // A newer listing (another choice, Refresh keys) is the table's. A key dropped: no table.
    if (n !== listing.n || gen !== keyGeneration) return;
    listing.status = shown;
    keysBody.replaceChildren(...page.data.map(listedRow));
    const none = shown ? `No ${shown} key.` : "No virtual key yet (npx kvgate keys create, or POST /admin/v1/keys).";
    if (page.data.length === 0) keysBody.append(el("tr", {}, el("td", { colspan: "6" }, none)));
    keysFollow(page);
  } catch (e) {
    if (n !== listing.n || gen !== keyGeneration) return;
    // The rows drawn are the listing's before, not the one chosen: left, they would read as its.
    keysBody.replaceChildren();
    say(status, `Reading the keys failed: ${message(e)}`, true);
  }
}

async function loadMoreKeys() {
  const after = listing.after;
  const n = listing.n;
  if (after === null || listing.reading === n) return;
  const gen = keyGeneration;
  listing.reading = n;
  try {
    const page = await readKeys(listing.status, after);
    if (n !== listing.n || gen !== keyGeneration) return;
    const rows = page.data.map(listedRow);
    keysBody.append(...rows);
    const focused = document.activeElement === moreKeys;
    keysFollow(page);
    // The button gone with the last page: the keyboard goes on in the rows it brought or, none
    // came (the keys past the table revoked since the page before said there were more), in the
    // last row: the button's focus would fall to the page's body.
    if (focused && moreKeys.hidden) (rows[0] ?? keysBody.lastElementChild)?.querySelector("button")?.focus();
    if (rows.length === 0) say(status, "No more keys.");
  } catch (e) {
    if (n !== listing.n || gen !== keyGeneration) return;
    say(status, `Reading more keys failed: ${message(e)}`, true);
  } finally {
    if (listing.reading === n) listing.reading = 0;
  }
}

/** @param {KeyView} k */
function keyRow(k) {
  const usage = el("button", { type: "button", "aria-label": `Usage of ${k.id}` }, "Usage");
  usage.addEventListener("click", () => void showUsage(k));
  const actions = el("td", { class: "actions" }, usage);
  if (k.status !== "revoked") {
    const revoke = el("button", { type: "button", "aria-label": `Revoke ${k.id}` }, "Revoke");
    revoke.addEventListener("click", () => void revokeKey(k));
    actions.append(" ", revoke);
  }
  return el(
    "tr",
    { "data-key": k.id },
    el("th", { scope: "row" }, `${k.name ?? "(no name)"} `, el("code", {}, `${k.prefix}…`)),
    el("td", {}, el("code", {}, k.id)),
    el("td", { "data-field": "status" }, k.status),
    el("td", {}, limits(k)),
    el("td", {}, `${k.spent.tokens} tokens, $${k.spent.cost_usd.toFixed(4)} (${k.spent.period})`),
    actions,
  );
}

/** @param {KeyView} k */
function limits(k) {
  const parts = [];
  // "total" is a budget for the key's whole life: "a total" would read as some period.
  const per = k.budget_period === "total" ? "in total" : `a ${k.budget_period}`;
  if (k.rpm !== null) parts.push(`${k.rpm} rpm`);
  if (k.tpm !== null) parts.push(`${k.tpm} tpm`);
  if (k.max_parallel !== null) parts.push(`${k.max_parallel} in flight`);
  if (k.budget_tokens !== null) parts.push(`${k.budget_tokens} tokens ${per}`);
  if (k.budget_usd !== null) parts.push(`$${k.budget_usd} ${per}`);
  if (k.models.length > 0) parts.push(`models: ${k.models.join(", ")}`);
  return parts.length === 0 ? "none" : parts.join(" · ");
}

/** @param {KeyView} k */
async function revokeKey(k) {
  if (!confirm(`Revoke ${k.name ?? k.id}? Requests with it are refused within 10 s, and it cannot be undone.`)) return;
  const gen = keyGeneration;
  try {
    const revoked = /** @type {KeyView} */ (await admin(`/keys/${enc(k.id)}/revoke`, { method: "POST" }));
    say(status, `${k.id} revoked.`);
    if (gen !== keyGeneration) return;
    revokedHere.set(k.id, revoked);
    // Its row alone, from the answer: the key stays in view, said revoked, until the table is read again.
    const shown = keysBody.querySelector(`tr[data-key="${CSS.escape(k.id)}"]`);
    if (!shown) return;
    const row = keyRow(revoked);
    shown.replaceWith(row);
    row.querySelector("button")?.focus();
  } catch (e) {
    say(status, `Revoking ${k.id} failed: ${message(e)}`, true);
  }
}

/** @param {KeyView} k */
async function showUsage(k) {
  const gen = keyGeneration;
  try {
    const u = /** @type {UsageView} */ (await admin(`/usage?key=${enc(k.id)}`));
    // The API answers the rows a page at a time; the totals above them are over every row. Later
    // pages ask for the first's days: left out, they are the gateway's today, which UTC midnight moves.
    const days = `since=${u.since}&until=${u.until}`;
    for (let page = u; page.has_more && page.next_after; ) {
      page = /** @type {UsageView} */ (await admin(`/usage?key=${enc(k.id)}&${days}&after=${enc(page.next_after)}`));
      u.by.push(...page.by);
    }
    if (gen !== keyGeneration) return;
    const title = byId("usage-title", HTMLElement);
    title.textContent = `Usage of ${k.name ?? k.id} (${k.id}), ${u.since} to ${u.until}`;
    byId("usage-totals", HTMLElement).textContent = `${u.requests} requests · ${u.prompt_tokens} prompt tokens (${u.cached_tokens} cached) · ${u.completion_tokens} completion tokens · $${u.cost_usd.toFixed(4)}`;
    const body = /** @type {HTMLTableSectionElement} */ (byId("usage-rows", HTMLTableElement).tBodies[0]);
    body.replaceChildren(
      ...u.by.map((r) =>
        el("tr", {}, ...[r.day, r.model, r.backend, r.requests, r.prompt_tokens, r.cached_tokens, r.completion_tokens, r.cost_usd.toFixed(4)].map((v) => el("td", {}, String(v)))),
      ),
    );
    usageBox.hidden = false;
    title.tabIndex = -1;
    title.focus();
  } catch (e) {
    if (gen !== keyGeneration) return;
    say(status, `Reading the usage of ${k.id} failed: ${message(e)}`, true);
  }
}
