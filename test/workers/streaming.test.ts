import { inject } from "vitest";
import { describe, expect, it } from "vitest";
import { scriptedStream } from "../support/scripted-upstream.ts";
import { UPSTREAM_MODEL } from "../support/test-config.ts";
import { chat, conversation, expectIdle, gateway, sseEvents } from "./gateway.ts";

describe("streaming pass-through", () => {
  it("delivers each event as it arrives, not when the stream ends", async () => {
    const t0 = Date.now();
    const res = await chat("streaming", conversation("slow"), { stream: true, max_tokens: 6, kvgate_sim: { chunk_delay_ms: 150 } });
    expect(res.headers.get("content-type")).toContain("text/event-stream");
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    const first = await reader.read();
    const firstAt = Date.now() - t0;
    expect(new TextDecoder().decode(first.value)).toContain('"delta"');
    while (!(await reader.read()).done);
    const endAt = Date.now() - t0;
    // Six events 150 ms apart: a buffering gateway would hand over the first only at the end.
    expect(endAt - firstAt).toBeGreaterThan(500);
    // The file's first test carries the runtime's warm-up: 16.8 s once under CPU load (found by a flake hunt), past the project's 15 s.
  }, 30_000);

  it("passes the upstream's bytes through unchanged when no hook is configured", async () => {
    const res = await gateway("/v1/chat/completions", {
      method: "POST",
      body: JSON.stringify({ model: "scripted", stream: true, messages: [{ role: "user", content: "hi" }] }),
    });
    expect(res.status).toBe(200);
    const got = new Uint8Array(await res.arrayBuffer());
    expect(got).toEqual(scriptedStream(UPSTREAM_MODEL).bytes);
    await expectIdle("scripted");
  });

  it("restamps the model in every chunk even where the field straddles chunk boundaries", async () => {
    const res = await gateway("/v1/chat/completions", {
      method: "POST",
      body: JSON.stringify({ model: "scripted-restamp", stream: true, messages: [{ role: "user", content: "hi" }] }),
    });
    const text = await res.text();
    const upstream = new TextDecoder().decode(scriptedStream(UPSTREAM_MODEL).bytes);
    expect(text).toBe(upstream.replaceAll(`"model":"${UPSTREAM_MODEL}"`, `"model":"scripted-restamp"`));
    expect(text).not.toContain(UPSTREAM_MODEL);
  });

  it("ends a stream whose upstream dies with an SSE error event, not a silent 200", async () => {
    const res = await chat("streaming", conversation("dies"), { stream: true, max_tokens: 20, kvgate_sim: { fail_after_chunks: 3 } });
    expect(res.status).toBe(200);
    const events = await sseEvents(res);
    expect(events).not.toContain("[DONE]");
    const last = JSON.parse(events.at(-1) ?? "{}") as { error?: { type?: string; code?: string } };
    expect(last.error?.code).toBe("upstream_stream_error");
    expect(events.length).toBeGreaterThanOrEqual(4);
    await expectIdle("streaming");
  });

  it("passes fields it does not know through untouched and rewrites only the model", async () => {
    const extra = { top_k: 7, min_p: 0.05, chat_template_kwargs: { enable_thinking: false }, stream_options: { include_usage: true }, repetition_penalty: 1.1 };
    const res = await chat("streaming", conversation("passthrough"), { ...extra, stream: true });
    await res.text();
    const backend = Number((res.headers.get("x-kvgate-backend") ?? "").replace("sim-", ""));
    const url = inject("upstreams").fleetUrls[backend] as string;
    const before = Date.now();
    const seen = (await (await fetch(`${url}/sim/requests`)).json()) as { body: Record<string, unknown>; headers: Record<string, string> }[];
    const body = seen.at(-1)?.body ?? {};
    expect(body).toMatchObject({ ...extra, model: UPSTREAM_MODEL, max_tokens: 4, stream: true });
    // The upstream learns when its backend was picked (the Durable Object's clock).
    const routedAt = Number(seen.at(-1)?.headers["x-kvgate-routed-at"]);
    expect(routedAt).toBeGreaterThan(before - 60_000);
    expect(routedAt).toBeLessThanOrEqual(Date.now());
  });
});
