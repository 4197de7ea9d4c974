import { describe, expect, it } from "vitest";
import { z, type core } from "zod/mini";
import { describeIssue, nearestName } from "../../src/zod-issues.ts";

describe("the key a misspelled one was meant to be", () => {
  it("is the known name the same but for case, or within an edit or two", () => {
    expect(nearestName("baseURL", ["model", "baseUrl"])).toBe("baseUrl");
    expect(nearestName("maxAttemps", ["maxAttempts", "on"])).toBe("maxAttempts");
    expect(nearestName("colour", ["model", "baseUrl"])).toBeNull();
  });

  it("is not looked for past 64 characters: an admin body's key of megabytes costs no table of edits", () => {
    // Each name's table is the typed key's length times the name's: a 4 MiB key against a schema's
    // 30 names would be ~2.5 billion steps of one admin call's CPU, for a suggestion no one needs.
    const name = "a".repeat(64);
    expect(nearestName(`${name}b`.slice(1), [name])).toBe(name);
    expect(nearestName(`${name}b`, [`${name}c`])).toBeNull();
  });
});

describe("a body of many unknown keys", () => {
  it("names the first 8, each with its hint, and counts the rest: its work and its message are bounded", () => {
    const Schema = z.strictObject({ baseUrl: z.optional(z.string()) });
    const body = Object.fromEntries(Array.from({ length: 60_000 }, (_, i) => [`k${String(i).padStart(6, "0")}`, 1]));
    const r = Schema.safeParse({ baseURL: "x", ...body });
    expect(r.success).toBe(false);
    const message = describeIssue((r as { error: { issues: core.$ZodIssue[] } }).error.issues[0] as core.$ZodIssue);
    expect(message).toBe("has unknown keys baseURL (did you mean baseUrl?), k000000, k000001, k000002, k000003, k000004, k000005, k000006 and 59,993 more");
  });
});
