import { describe, expect, it } from "vitest";
import { postJson, readSse } from "../../bench/fleet/sim-client.ts";
import { useFleets } from "../support/fleets.ts";

const fleetOf = useFleets();
const model = "kvgate-sim";

interface ResponseBody {
  id: string;
  object: string;
  status: string;
  instructions: string | null;
  incomplete_details: { reason: string } | null;
  output: { id: string; type: string; role: string; status: string; content: { type: string; text: string }[] }[];
  usage: { input_tokens: number; input_tokens_details: { cached_tokens: number }; output_tokens: number; total_tokens: number } | null;
}
interface ResponseEvent {
  type: string;
  sequence_number: number;
  delta?: string;
  response?: ResponseBody;
}

describe("POST /v1/responses", () => {
  it("answers a response object: the assistant's message in output, usage as the Responses API counts it", async () => {
    const fleet = await fleetOf({ workers: 1 });
    const r = await postJson(`${fleet.urls[0]}/v1/responses`, { model, instructions: "Be brief.", input: "Say something." });
    expect(r.status).toBe(200);
    const body = r.json as ResponseBody;
    expect(body).toMatchObject({ object: "response", status: "completed", instructions: "Be brief.", incomplete_details: null });
    expect(body.id).toMatch(/^resp_/);
    expect(body.output).toHaveLength(1);
    expect(body.output[0]).toMatchObject({ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text" }] });
    expect(body.output[0]?.content[0]?.text).toHaveLength(16 * 4);
    expect(body.usage?.output_tokens).toBe(16);
    expect(body.usage?.total_tokens).toBe((body.usage?.input_tokens ?? 0) + 16);
  });

  it("is incomplete when it reaches max_output_tokens", async () => {
    const fleet = await fleetOf({ workers: 1 });
    const body = (await postJson(`${fleet.urls[0]}/v1/responses`, { model, input: "x", max_output_tokens: 3 })).json as ResponseBody;
    expect(body).toMatchObject({ status: "incomplete", incomplete_details: { reason: "max_output_tokens" } });
    expect(body.output[0]?.content[0]?.text).toHaveLength(12);
  });

  it("streams typed events with consecutive sequence numbers, one delta per token, and no [DONE]", async () => {
    const fleet = await fleetOf({ workers: 1 });
    const read = await readSse(`${fleet.urls[0]}/v1/responses`, { model, input: "x", stream: true, max_output_tokens: 5, kvgate_sim: { tokens: 4 } });
    expect(read.contentType).toContain("text/event-stream");
    expect(read.ended).toBe("eof");
    const events = read.events.map((e) => JSON.parse(e.data) as ResponseEvent);
    expect(events.map((e) => e.type)).toEqual([
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.content_part.added",
      ...Array.from({ length: 4 }, () => "response.output_text.delta"),
      "response.output_text.done",
      "response.content_part.done",
      "response.output_item.done",
      "response.completed",
    ]);
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    const completed = events.at(-1)?.response;
    expect(completed?.output[0]?.content[0]?.text).toBe(events.map((e) => e.delta ?? "").join(""));
    expect(completed?.usage?.output_tokens).toBe(4);
    expect(events[0]?.response).toMatchObject({ status: "in_progress", output: [], usage: null });
  });

  it("renders its input as the chat it stands for: the next turn, sent back as items, hits the prefix cache", async () => {
    const fleet = await fleetOf({ workers: 1 });
    const url = `${fleet.urls[0]}/v1/responses`;
    const instructions = "You answer in one line. ".repeat(20);
    const first = (await postJson(url, { model, instructions, input: "What is a KV cache?" })).json as ResponseBody;
    expect(first.usage?.input_tokens_details.cached_tokens).toBe(0);
    const input = [
      { role: "user", content: "What is a KV cache?" },
      { type: "message", role: "assistant", content: [{ type: "output_text", text: first.output[0]?.content[0]?.text }] },
      { type: "function_call", call_id: "c1", name: "lookup", arguments: "{}" },
      { type: "function_call_output", call_id: "c1", output: "found it" },
      { role: "user", content: [{ type: "input_text", text: "Why does it matter?" }] },
    ];
    const next = (await postJson(url, { model, instructions, input })).json as ResponseBody;
    // Everything through the first answer is cached, in whole blocks.
    expect(next.usage?.input_tokens_details.cached_tokens).toBeGreaterThanOrEqual((first.usage?.input_tokens ?? 0) - 16);
    // The same conversation as a chat request reads the same prompt.
    const chat = (await postJson(`${fleet.urls[0]}/v1/chat/completions`, {
      model,
      messages: [{ role: "system", content: instructions }, { role: "user", content: "What is a KV cache?" }],
    })).json as { usage: { prompt_tokens: number } };
    expect(chat.usage.prompt_tokens).toBe(first.usage?.input_tokens);
  });

  it.each([
    [{ model }, "input must be"],
    [{ model, input: [] }, "input must be"],
    [{ model, input: ["x"] }, "input[0] must be an object"],
    [{ model, input: "x", max_output_tokens: 0 }, "max_output_tokens must be an integer of at least 1"],
  ])("answers a 400 for %j", async (body, message) => {
    const fleet = await fleetOf({ workers: 1 });
    const r = await postJson(`${fleet.urls[0]}/v1/responses`, body);
    expect(r.status).toBe(400);
    expect(JSON.stringify(r.json)).toContain(message);
  });
});
