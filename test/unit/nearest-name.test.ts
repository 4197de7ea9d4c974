import { describe, expect, it } from "vitest";
import { nearestName } from "../../src/zod-issues.ts";

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
