import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startHostileUpstream, type HostileUpstream } from "../support/hostile-upstream.ts";
import { startTestGateway, type TestGateway } from "./gateway.ts";

/**
 * Prompts whose block hashes collide, through the bundled gateway on a real socket. A block's hash
 * is 53 bits of a public, unkeyed function of the prompt's text up to it, so a client can search
 * for a collision offline in seconds (Pollard's rho, about 2^27 hashes): the pair below was found
 * so. The routing object may then misjudge that client's own prompt; it must stay whole.
 */

/** `two`'s second block hashes as `one`'s first: a prompt one block long and one two blocks long. */
const COLLIDING = { one: "c17cfe06a9be030", two: `${"Z".repeat(57)}1efddf091c3933` };

let upstream: HostileUpstream;
let gw: TestGateway;

beforeAll(async () => {
  upstream = await startHostileUpstream();
  // A prefix set of two blocks: the two-block prompt fills it.
  gw = await startTestGateway({
    modelGroups: [
      { name: "collide", deployments: [{ id: "ok", baseUrl: `${upstream.url}/ok`, model: "hostile-7b", kvCapacityBlocks: 2 }] },
      { name: "delimiters", deployments: [{ id: "ok", baseUrl: `${upstream.url}/ok`, model: "hostile-7b" }] },
    ],
  });
});
afterAll(async () => {
  await gw?.close();
  await upstream?.close();
});

async function chat(contents: string[], model = "collide"): Promise<Response> {
  return fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
    body: JSON.stringify({ model, messages: contents.map((content) => ({ role: "user", content })) }),
    signal: AbortSignal.timeout(10_000),
  });
}

describe("a prompt whose first block collides with a block held deeper in a prefix set", () => {
  it("is learned within the set's capacity, and the group goes on routing", async () => {
    const held = await chat([COLLIDING.two]);
    expect(held.status).toBe(200);
    expect(held.headers.get("x-kvgate-prefix-blocks")).toBe("0/2");
    await held.text();
    // Its first block is found at the held prompt's second: matched, a path one block longer than its chain.
    const colliding = await chat([COLLIDING.one, "and a second message"]);
    expect(colliding.status).toBe(200);
    expect(colliding.headers.get("x-kvgate-prefix-blocks")).toBe("1/2");
    await colliding.text();
    const [backend] = (await gw.status("collide")).backends;
    expect(backend?.prefixCapacity).toBe(2);
    // It was 3: a block written past the end of the set's arrays, and its bucket linked to no slot.
    expect(backend?.prefixBlocks).toBe(2);
    // Which sent the lookup of this prompt's next block round that bucket for ever: the group's object hung.
    const again = await chat([COLLIDING.one, "and a second message"]);
    expect(again.status).toBe(200);
    await again.text();
  });
});

describe("text that writes the delimiters the prompt's hash puts around each message's role", () => {
  it("is hashed as that text, not as the messages it spells: no match with them", async () => {
    // Nine messages "a": each is \u0001user\u0002a in the hashed text, a block of its own.
    const nine = await chat(Array.from({ length: 9 }, () => "a"), "delimiters");
    expect(nine.headers.get("x-kvgate-prefix-blocks")).toBe("0/9");
    await nine.text();
    // One message whose text is the other eight written out: the same characters, one block,
    // which hashed as the nine messages' last block, found at its ninth place in the set.
    const one = await chat([`a${"\u0001user\u0002a".repeat(8)}`, "and a second message"], "delimiters");
    expect(one.status).toBe(200);
    expect(one.headers.get("x-kvgate-prefix-blocks")?.split("/")[0]).toBe("0");
    await one.text();
  });
});
