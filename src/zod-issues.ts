import * as z from "zod/mini";
import type { core } from "zod/mini";

// zod drops an issue's input before handing the issue out (unless a parse passes reportInput), so
// afterwards a missing field and one of the wrong type look alike: both said "is required". The
// global error map still sees the input; it marks the missing ones, and describeIssue reads the mark.
// It also sees the object schema that found keys it does not know, so it names the key each was
// likely meant to be: the issue handed out keeps only the unknown keys.
const MISSING = "kvgate:missing";
z.config({
  customError: (issue) => {
    if (issue.input === undefined) return MISSING;
    if (issue.code === "unrecognized_keys") return unknownKeys(issue.keys, knownKeys(issue.inst, issue.input));
    return undefined;
  },
});

/** The keys the object schema `inst` takes that `input` does not have: what a misspelled key may have been meant to be. */
function knownKeys(inst: unknown, input: unknown): string[] {
  const shape = (inst as { _zod?: { def?: { shape?: unknown } } } | undefined)?._zod?.def?.shape;
  if (typeof shape !== "object" || shape === null) return [];
  const given = typeof input === "object" && input !== null ? input : {};
  return Object.keys(shape).filter((k) => !Object.hasOwn(given, k));
}

/**
 * Unknown keys named in one message, each with its hint: a body of 60,000 of them (a 4 MiB
 * heartbeat, sent with the register key every GPU server holds) cost the fleet registry a table of
 * edits for each, seconds of its one thread, and was echoed whole in the 400.
 */
const NAMED_KEYS = 8;

/** "has unknown key baseURL (did you mean baseUrl?)", each unknown key with the known one it is nearest, if one is near; the first NAMED_KEYS of them. */
function unknownKeys(keys: readonly string[], known: readonly string[]): string {
  const named = keys.slice(0, NAMED_KEYS).map((key) => {
    const meant = nearestName(key, known);
    return meant === null ? key : `${key} (did you mean ${meant}?)`;
  });
  const more = keys.length > NAMED_KEYS ? ` and ${(keys.length - NAMED_KEYS).toLocaleString("en-US")} more` : "";
  return `has unknown key${keys.length === 1 ? "" : "s"} ${named.join(", ")}${more}`;
}

const MAX_NAME_CHARS = 64;

/**
 * The name of `names` that `typed` most likely misspells: the same but for case, or the nearest
 * within one edit (two, for names of six letters or more), an edit being a letter added, dropped,
 * changed, or two swapped. Null when none is that near.
 */
export function nearestName(typed: string, names: readonly string[]): string | null {
  // No name is that long: a key past it (an admin body's, up to its limit) costs no table of edits.
  if (typed.length > MAX_NAME_CHARS) return null;
  const lower = typed.toLowerCase();
  let best: string | null = null;
  let bestDistance = Infinity;
  for (const name of names) {
    const d = editDistance(lower, name.toLowerCase());
    if (d < bestDistance) [best, bestDistance] = [name, d];
  }
  const allowed = Math.min(lower.length, best?.length ?? 0) >= 6 ? 2 : 1;
  return bestDistance <= allowed ? best : null;
}

/** Edits from `a` to `b`: letters added, dropped or changed, and neighbours swapped (optimal string alignment). */
function editDistance(a: string, b: string): number {
  // Rows i-2, i-1 and i of the table, each b.length + 1 long.
  let before: number[] = [];
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let d = Math.min((prev[j] as number) + 1, (row[j - 1] as number) + 1, (prev[j - 1] as number) + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d = Math.min(d, (before[j - 2] as number) + 1);
      row.push(d);
    }
    [before, prev] = [prev, row];
  }
  return prev[b.length] as number;
}

/** How a type zod names is said in a sentence: "must be a number", "must be an object". */
const TYPE_WORDS: Readonly<Record<string, string>> = {
  string: "a string",
  number: "a number",
  int: "an integer",
  bigint: "an integer",
  boolean: "true or false",
  object: "an object",
  record: "an object",
  array: "an array",
  tuple: "an array",
  null: "null",
};

/** `messages[2].content` style path, the way a user would name the field. */
export function fieldPath(path: readonly PropertyKey[]): string {
  let out = "";
  for (const key of path) {
    if (typeof key === "number") out += `[${key}]`;
    else out += out === "" ? String(key) : `.${String(key)}`;
  }
  return out;
}

/**
 * zod/mini ships no English messages (the locale would add weight to the Worker bundle), so the
 * handful of issue kinds a request or config can raise are described here.
 */
export function describeIssue(issue: core.$ZodIssue): string {
  // Whatever the schema (a union's issue is no invalid_type), a field that is not there is missing.
  if (issue.message === MISSING) return "is required";
  switch (issue.code) {
    case "invalid_type":
      return `must be ${TYPE_WORDS[issue.expected] ?? issue.expected}`;
    case "too_small":
      return issue.origin === "array" || issue.origin === "string"
        ? `must have at least ${String(issue.minimum)} ${issue.origin === "array" ? "item(s)" : "character(s)"}`
        : `must be ${issue.inclusive ? ">=" : ">"} ${String(issue.minimum)}`;
    case "too_big":
      return issue.origin === "array" || issue.origin === "string"
        ? `must have at most ${String(issue.maximum)} ${issue.origin === "array" ? "item(s)" : "character(s)"}`
        : `must be ${issue.inclusive ? "<=" : "<"} ${String(issue.maximum)}`;
    case "invalid_value":
      // One value allowed is no choice: `stream` on an endpoint that answers one JSON body is false or absent.
      return issue.values.length === 1 ? `must be ${JSON.stringify(issue.values[0])}` : `must be one of ${issue.values.map((v) => JSON.stringify(v)).join(", ")}`;
    case "invalid_format":
      // A pattern says nothing to a user: each z.regex and z.url of the schemas carries what it wants in words.
      return issue.format === "regex" || issue.format === "url" ? issue.message : `must be a valid ${issue.format}`;
    case "unrecognized_keys":
      // The error map above said it, with the key each was likely meant to be, if it saw the issue.
      return issue.message.startsWith("has unknown key") ? issue.message : unknownKeys(issue.keys, []);
    case "invalid_union":
      return "has an invalid type or shape";
    case "custom":
      // A refinement says in its own words what it wants.
      return issue.message;
    default:
      return "is invalid";
  }
}

/** One issue as "`field` reason", plus the field path for OpenAI's `param`; `whole` names the value itself. */
function issueLine(issue: core.$ZodIssue, whole: string): { param: string; message: string } {
  const param = fieldPath(issue.path);
  return { param, message: `${param || whole} ${describeIssue(issue)}` };
}

/** First issue as "`field` reason", plus the field path for OpenAI's `param`: a request's 400 names one field. */
export function firstIssue(issues: readonly core.$ZodIssue[]): { param: string; message: string } {
  const issue = issues[0];
  return issue ? issueLine(issue, "body") : { param: "", message: "is invalid" };
}

/** Every issue, one "`field` reason" line each: a config is fixed in one go, not one error per try. */
export function allIssues(issues: readonly core.$ZodIssue[], whole: string): string[] {
  return issues.map((issue) => issueLine(issue, whole).message);
}
