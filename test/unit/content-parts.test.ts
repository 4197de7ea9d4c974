import { describe, expect, it } from "vitest";
import type { Endpoint } from "../../src/openai/endpoints.ts";
import { contentPartRefusal, unfetchable } from "../../src/openai/content-parts.ts";

describe("unfetchable: a media URL a tenant may not have an engine fetch", () => {
  it.each([
    ["http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a link-local address"],
    ["http://10.0.0.5/x.png", "10.0.0.5 is a private address"],
    ["https://172.16.3.4/x.png", "172.16.3.4 is a private address"],
    ["http://192.168.1.20:9000/a.wav", "192.168.1.20 is a private address"],
    ["http://127.0.0.1:8000/v1/models", "127.0.0.1 is a loopback address"],
    ["http://100.64.0.1/", "100.64.0.1 is a carrier-grade NAT address"],
    ["http://localhost:6379/", "localhost is a loopback address"],
    ["http://localhost./", "localhost. is a loopback address"],
    ["http://[::1]:8080/admin", "[::1] is a loopback address"],
    ["http://[::ffff:169.254.169.254]/", "[::ffff:a9fe:a9fe] is a link-local address"],
    ["http://[fd12:3456::1]/", "[fd12:3456::1] is a private address"],
    ["http://[fe80::1]/", "[fe80::1] is a link-local address"],
    ["http://metadata.google.internal/computeMetadata/v1/", "metadata.google.internal is a private network's name (.internal)"],
    ["http://vllm-0/", "vllm-0 is a single-label name"],
    // On Kubernetes the engine's resolver searches <ns>.svc.cluster.local first: these are ClusterIPs.
    ["http://kubernetes.default.svc/", "kubernetes.default.svc is a name no public DNS resolves (.svc is no public top-level domain)"],
    ["http://prometheus.monitoring:9090/", "prometheus.monitoring is a name no public DNS resolves (.monitoring is no public top-level domain)"],
    ["http://localhost.localdomain/", "localhost.localdomain is a name no public DNS resolves (.localdomain is no public top-level domain)"],
    // An IPv6 address a network translates to the IPv4 it embeds: NAT64's well-known prefix, 6to4.
    ["http://[64:ff9b::a00:5]/", "[64:ff9b::a00:5] is a private address"],
    ["http://[64:ff9b::169.254.169.254]/", "[64:ff9b::a9fe:a9fe] is a link-local address"],
    ["http://[2002:a9fe:a9fe::]/", "[2002:a9fe:a9fe::] is a link-local address"],
    // Spellings of an address the URL parser writes in dotted form, as the fetch would reach it.
    ["http://2852039166/", "169.254.169.254 is a link-local address"],
    ["http://0xa9fea9fe/", "169.254.169.254 is a link-local address"],
    ["http://0251.0376.0251.0376/", "169.254.169.254 is a link-local address"],
    ["http://127.1/", "127.0.0.1 is a loopback address"],
    ["HTTP://10.0.0.5/", "10.0.0.5 is a private address"],
    ["  http://10.0.0.5/", "10.0.0.5 is a private address"],
    ["http://169.254.\n169.254/", "169.254.169.254 is a link-local address"],
    // The host is what follows the last @, before any / or \ (as urllib3, which vLLM and requests use, reads it).
    ["http://images.example.com@10.0.0.5/", "10.0.0.5 is a private address"],
    ["http://10.0.0.5\\@images.example.com/", "10.0.0.5 is a private address"],
  ])("%s: its host %s", (url, why) => {
    expect(unfetchable(url)).toContain(`its host ${why}`);
  });

  it("refuses an http URL with a backslash before its path: Python's URL parsers (yarl before its fix, urllib) take the host after the last @, where WHATWG's ends it at the \\", () => {
    expect(unfetchable("http://images.example.com\\@169.254.169.254/latest/meta-data/")).toContain("backslash");
    expect(unfetchable("https://cdn.example.com\\/x.png")).toContain("backslash");
    // A tab, CR or LF inside the scheme: WHATWG and Python's parsers both drop them.
    expect(unfetchable("ht\ttp://images.example.com\\@169.254.169.254/")).toContain("backslash");
    expect(unfetchable("http\n://images.example.com\\@169.254.169.254/")).toContain("backslash");
  });

  it.each([
    ["an absolute path with a media extension", "/home/vllm/secret.png"],
    ["a relative path", "../weights/x.jpg"],
    ["a path from the home folder", "~/.cache/x.webp"],
    ["a short absolute path", "/etc/passwd"],
    ["a name with an audio extension", "recording.WAV"],
    ["a path with a space", "/home/u/my file"],
    ["a path climbing out of a folder", "sglang/../../etc/passwd"],
  ])("refuses %s: SGLang opens a path on its own disk", (_what, value) => {
    expect(unfetchable(value)).toContain("a path on the engine's own disk");
  });

  it("passes bare base64 of a JPEG, which starts with a slash", () => {
    expect(unfetchable(`/9j/4AAQSkZJRgABAQAAAQABAAD${"A".repeat(400)}`)).toBeNull();
  });

  it("refuses a file: URL, read off the engine's own disk, and an http URL the parser cannot read", () => {
    expect(unfetchable("file:///etc/passwd")).toBe("a file: URL is read off the engine's own disk");
    expect(unfetchable("http://10.0.0.5:99999/")).toContain("cannot be parsed");
    expect(unfetchable("https://exa mple.com/")).toContain("cannot be parsed");
  });

  it.each([
    ["a data: URL", "data:image/png;base64,iVBORw0KGgo="],
    ["a data: URL in capitals", "DATA:image/png;base64,iVBORw0KGgo="],
    ["a public host's https URL", "https://upload.wikimedia.org/wikipedia/commons/a/a9/Example.jpg"],
    ["a public address", "http://93.184.215.14/cat.png"],
    ["a public address through NAT64", "http://[64:ff9b::5db8:d70e]/cat.png"],
    ["an IDN's host", "https://пример.рф/cat.png"],
    ["bare base64 (SGLang's)", "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="],
    ["a scheme no engine fetches", "ftp://10.0.0.5/x.png"],
  ])("passes %s", (_what, url) => {
    expect(unfetchable(url)).toBeNull();
  });
});

const PRIVATE = "http://10.0.0.5/x.png";
const PUBLIC = "https://upload.wikimedia.org/x.png";

/** The param of the 400 for `body` on `endpoint`, or null when it is passed on. */
function refusedParam(endpoint: Endpoint, body: Record<string, unknown>): string | null {
  const e = contentPartRefusal(endpoint, body);
  if (e === null) return null;
  expect(e).toMatchObject({ status: 400, type: "invalid_request_error", code: "invalid_value" });
  expect(e.message).toMatch(new RegExp(`^${e.param?.replace(/[[\].]/g, "\\$&")} is not accepted from a virtual key: `));
  return e.param;
}

describe("contentPartRefusal: where a body holds media URLs", () => {
  it("chat: every message's content parts, typed or not, as {url} or a bare string; string content is not read", () => {
    const messages = (...content: unknown[]) => ({ messages: [{ role: "system", content: "Be brief." }, { role: "user", content }] });
    expect(refusedParam("chat", { messages: [{ role: "user", content: `look at ${PRIVATE}` }] })).toBeNull();
    expect(refusedParam("chat", messages("hi", null, 3, { type: "text", text: PRIVATE }, { type: "image_url", image_url: { url: PUBLIC } }))).toBeNull();
    expect(refusedParam("chat", messages({ type: "image_url", image_url: { url: PRIVATE } }))).toBe("messages[1].content[0].image_url.url");
    expect(refusedParam("chat", messages({ type: "text", text: "hi" }, { image_url: PRIVATE }))).toBe("messages[1].content[1].image_url");
    expect(refusedParam("chat", messages({ type: "audio_url", audio_url: { url: PRIVATE } }))).toBe("messages[1].content[0].audio_url.url");
    expect(refusedParam("chat", messages({ video_url: PRIVATE }))).toBe("messages[1].content[0].video_url");
    // vLLM reads the untyped form off a part with a uuid, whatever its type says.
    expect(refusedParam("chat", messages({ type: "text", text: "hi", uuid: "u1", image_url: PRIVATE }))).toBe("messages[1].content[0].image_url");
    // The first one refused is named.
    expect(refusedParam("chat", messages({ image_url: PUBLIC }, { audio_url: PRIVATE }, { image_url: PRIVATE }))).toBe("messages[1].content[1].audio_url");
  });

  it("responses: input items and their content parts; a string input is not read", () => {
    expect(refusedParam("responses", { input: PRIVATE })).toBeNull();
    expect(refusedParam("responses", { input: [{ role: "user", content: [{ type: "input_image", image_url: PUBLIC, detail: "auto" }] }] })).toBeNull();
    expect(refusedParam("responses", { input: [{ role: "user", content: "hi" }, { role: "user", content: [{ type: "input_image", image_url: PRIVATE, detail: "auto" }] }] })).toBe("input[1].content[0].image_url");
    expect(refusedParam("responses", { input: [{ role: "user", content: [{ type: "input_file", file_url: PRIVATE }] }] })).toBe("input[0].content[0].file_url");
    expect(refusedParam("responses", { input: [{ type: "input_image", image_url: PRIVATE }] })).toBe("input[0].image_url");
    // A tool's output may be a list of parts, images among them.
    expect(refusedParam("responses", { input: [{ type: "function_call_output", call_id: "c1", output: "done" }] })).toBeNull();
    expect(refusedParam("responses", { input: [{ type: "function_call_output", call_id: "c1", output: [{ type: "input_image", image_url: PRIVATE }] }] })).toBe("input[0].output[0].image_url");
    // Or one part, not a list: a computer call's screenshot, a function's image.
    expect(refusedParam("responses", { input: [{ type: "computer_call_output", call_id: "c1", output: { type: "computer_screenshot", image_url: PRIVATE } }] })).toBe("input[0].output.image_url");
    expect(refusedParam("responses", { input: [{ type: "function_call_output", call_id: "c1", output: { type: "input_image", image_url: PRIVATE } }] })).toBe("input[0].output.image_url");
    expect(refusedParam("responses", { input: [{ type: "computer_call_output", call_id: "c1", output: { type: "computer_screenshot", image_url: PUBLIC } }] })).toBeNull();
    expect(refusedParam("responses", { input: [{ type: "computer_call_output", call_id: "c1", output: { type: "computer_screenshot", image_url: "data:image/png;base64,iVBORw0KGgo=" } }] })).toBeNull();
    expect(refusedParam("responses", { input: [{ type: "function_call_output", call_id: "c1", output: PRIVATE }] })).toBeNull();
  });

  it("embeddings: vLLM's chat-style messages, as chat's; an input of texts or token ids is not read", () => {
    expect(refusedParam("embeddings", { input: [PRIVATE, PRIVATE] })).toBeNull();
    expect(refusedParam("embeddings", { messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: PRIVATE } }] }] })).toBe("messages[0].content[0].image_url.url");
  });

  it("rerank and score: vLLM's multimodal object, {content: [parts]}, on either side; lists of texts are not read", () => {
    const image = { content: [{ type: "image_url", image_url: { url: PRIVATE } }] };
    expect(refusedParam("rerank", { query: "a cat", documents: [PRIVATE] })).toBeNull();
    expect(refusedParam("rerank", { query: "a cat", documents: image })).toBe("documents.content[0].image_url.url");
    expect(refusedParam("rerank", { query: image, documents: ["x"] })).toBe("query.content[0].image_url.url");
    expect(refusedParam("score", { text_1: "a cat", text_2: image })).toBe("text_2.content[0].image_url.url");
    expect(refusedParam("score", { data_1: image, data_2: "x" })).toBe("data_1.content[0].image_url.url");
  });

  it("completions: no content parts, nothing read", () => {
    expect(refusedParam("completions", { prompt: PRIVATE, messages: [{ role: "user", content: [{ image_url: PRIVATE }] }] })).toBeNull();
  });
});

describe("contentPartRefusal: a part's fields that steer an engine, read in the same walk", () => {
  const refused = (endpoint: Endpoint, body: Record<string, unknown>) => {
    const e = contentPartRefusal(endpoint, body);
    return e && { status: e.status, code: e.code, param: e.param };
  };
  const tensor = { type: "input_image", image_embeds: "UEsDBAAACAgA" };

  it("refuses a tensor or a tiling wherever a body holds parts: chat, Responses input items and their content, rerank", () => {
    expect(refused("chat", { messages: [{ role: "user", content: [{ type: "text", text: "hi" }, tensor] }] })).toEqual({ status: 400, code: "unsupported_parameter", param: "messages[0].content[1].image_embeds" });
    expect(refused("responses", { input: [{ role: "user", content: [tensor] }] })).toEqual({ status: 400, code: "unsupported_parameter", param: "input[0].content[0].image_embeds" });
    expect(refused("responses", { input: [tensor] })).toEqual({ status: 400, code: "unsupported_parameter", param: "input[0].image_embeds" });
    expect(refused("responses", { input: [{ type: "function_call_output", call_id: "c", output: tensor }] })).toEqual({ status: 400, code: "unsupported_parameter", param: "input[0].output.image_embeds" });
    expect(refused("rerank", { query: { content: [{ type: "image_url", image_url: { url: PUBLIC, max_dynamic_patch: 40 } }] }, documents: [] })).toEqual({ status: 400, code: "unsupported_parameter", param: "query.content[0].image_url.max_dynamic_patch" });
  });

  it("passes parts that set none of them, and a null one (a field left unset)", () => {
    expect(refused("responses", { input: [{ role: "user", content: [{ type: "input_image", image_url: PUBLIC, image_embeds: null }] }] })).toBeNull();
    expect(refused("chat", { messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: PUBLIC } }] }] })).toBeNull();
  });
});

describe("contentPartRefusal: an array where a part would be", () => {
  /** An array whose every read of a key (an index, a field, the list of its keys) is counted. */
  function countedArray(length: number): { array: unknown[]; reads: () => number } {
    let reads = 0;
    const array = new Proxy(new Array<number>(length).fill(0), {
      get: (target, key, receiver) => {
        reads++;
        return Reflect.get(target, key, receiver);
      },
      ownKeys: (target) => {
        reads++;
        return Reflect.ownKeys(target);
      },
      has: (target, key) => {
        reads++;
        return Reflect.has(target, key);
      },
    });
    return { array, reads: () => reads };
  }

  it.each<[Endpoint, (inner: unknown[]) => Record<string, unknown>]>([
    ["rerank", (inner) => ({ model: "m", query: { content: [inner] }, documents: ["a"] })],
    ["rerank", (inner) => ({ model: "m", query: "q", documents: [{ content: [inner] }] })],
    ["score", (inner) => ({ model: "m", text_1: { content: [inner] }, text_2: "b" })],
    ["responses", (inner) => ({ model: "m", input: [{ type: "function_call_output", call_id: "c", output: [inner] }] })],
    ["responses", (inner) => ({ model: "m", input: [inner] })],
  ])("%s: is passed over unread, not walked as a part", (endpoint, bodyOf) => {
    const { array, reads } = countedArray(100_000);
    expect(contentPartRefusal(endpoint, bodyOf(array))).toBeNull();
    // Read as a part, its four URL fields were looked up and for…in listed its 100,000 indices.
    expect(reads()).toBe(0);
  });
});
