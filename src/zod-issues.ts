import * as z from "zod/mini";
import type { core } from "zod/mini";

// zod drops an issue's input before handing the issue out (unless a parse passes reportInput), so
// afterwards a missing field and one of the wrong type look alike: both said "is required". The
// global error map still sees the input; it marks the missing ones, and describeIssue reads the mark.
const MISSING = "kvgate:missing";
z.config({ customError: (issue) => (issue.input === undefined ? MISSING : undefined) });

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
      return `must be ${issue.expected}`;
    case "too_small":
      return issue.origin === "array" || issue.origin === "string"
        ? `must have at least ${String(issue.minimum)} ${issue.origin === "array" ? "item(s)" : "character(s)"}`
        : `must be ${issue.inclusive ? ">=" : ">"} ${String(issue.minimum)}`;
    case "too_big":
      return issue.origin === "array" || issue.origin === "string"
        ? `must have at most ${String(issue.maximum)} ${issue.origin === "array" ? "item(s)" : "character(s)"}`
        : `must be ${issue.inclusive ? "<=" : "<"} ${String(issue.maximum)}`;
    case "invalid_value":
      return `must be one of ${issue.values.map((v) => JSON.stringify(v)).join(", ")}`;
    case "invalid_format":
      // A pattern says nothing to a user: each z.regex and z.url of the schemas carries what it wants in words.
      return issue.format === "regex" || issue.format === "url" ? issue.message : `must be a valid ${issue.format}`;
    case "unrecognized_keys":
      return `has unknown key(s) ${issue.keys.join(", ")}`;
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
