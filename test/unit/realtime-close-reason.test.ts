import { describe, expect, it } from "vitest";
import { closeReason } from "../../src/realtime/closing.ts";

describe("the reason of a close the gateway sends", () => {
  it("is cut to a close frame's 123 bytes at a character's edge: a refusal naming a long model or origin is still sent", () => {
    expect(closeReason("API key sk-kvg-abcde… was revoked")).toBe("API key sk-kvg-abcde… was revoked");
    const long = `The model "${"m".repeat(64)}" does not exist or you do not have access to it (GET /v1/models lists the models you can use)`;
    expect(new TextEncoder().encode(closeReason(long)).length).toBe(123);
    const cut = closeReason(`x${"é".repeat(80)}`);
    expect(cut).toBe(`x${"é".repeat(61)}`);
  });
});
