import { describe, expect, it } from "vitest";
import { heldWhole, WHOLE_READ_MAX_BYTES } from "../../src/upstream/whole-read.ts";

describe("which non-streamed answers are read whole for their usage", () => {
  it.each([
    ["a completion that says its size", { "content-length": "2048" }, true],
    ["one at the bound", { "content-length": String(WHOLE_READ_MAX_BYTES) }, true],
    ["one past it", { "content-length": String(WHOLE_READ_MAX_BYTES + 1) }, false],
    ["one that does not say its size", {}, false],
    // The runtime decodes gzip and br and keeps the header: the length is the compressed size.
    ["a gzip answer, whose decoded size its length does not say", { "content-length": "2048", "content-encoding": "gzip" }, false],
    ["a br answer, likewise", { "content-length": "2048", "content-encoding": "br" }, false],
  ])("%s: %s", (_name, headers, whole) => {
    expect(heldWhole(new Headers(headers))).toBe(whole);
  });
});
