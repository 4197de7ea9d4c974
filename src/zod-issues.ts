import type { core } from "zod/mini";

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
  switch (issue.code) {
    case "invalid_type":
      return issue.input === undefined ? "is required" : `must be ${issue.expected}`;
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
      return `must be a valid ${issue.format}`;
    case "unrecognized_keys":
      return `has unknown key(s) ${issue.keys.join(", ")}`;
    case "invalid_union":
      return "has an invalid type or shape";
    default:
      return "is invalid";
  }
}

/** First issue as "`field` reason", plus the field path for OpenAI's `param`. */
export function firstIssue(issues: readonly core.$ZodIssue[]): { param: string; message: string } {
  const issue = issues[0];
  if (!issue) return { param: "", message: "is invalid" };
  const param = fieldPath(issue.path);
  const where = issue.code === "unrecognized_keys" || param === "" ? param || "body" : param;
  return { param, message: `${where} ${describeIssue(issue)}` };
}
