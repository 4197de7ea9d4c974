import { describe, expect, it } from "vitest";
import { useFleets } from "../support/fleets.ts";
import { connect, opened } from "../support/websocket-client.ts";

const fleetOf = useFleets();

const wsUrl = (httpUrl: string, query: string) => `${httpUrl.replace(/^http/, "ws")}/v1/realtime${query}`;

describe("a simulated worker's /v1/realtime", () => {
  it("opens a session for the model it serves: session.created, then a response token by token", async () => {
    const fleet = await fleetOf({ workers: 1, servedModelName: "rt-7b" });
    const s = opened(await connect(wsUrl(fleet.urls[0] as string, "?model=rt-7b"), { protocols: ["realtime"] }));
    expect(s.ws.protocol).toBe("realtime");
    expect(s.headers["x-sim-worker"]).toBe("0");
    const created = await s.event("session.created");
    expect(created.session).toMatchObject({ object: "realtime.session", model: "rt-7b" });

    s.ws.send(JSON.stringify({ type: "response.create", event_id: "c1", response: { max_output_tokens: 5 } }));
    await s.event("response.created");
    const deltas: string[] = [];
    for (;;) {
      const e = JSON.parse((await s.next()).data.toString("utf8")) as Record<string, unknown>;
      if (e.type === "response.text.delta") deltas.push(String(e.delta));
      else {
        expect(e.type).toBe("response.text.done");
        expect(e.text).toBe(deltas.join(""));
        break;
      }
    }
    expect(deltas).toHaveLength(5);
    const done = await s.event("response.done");
    expect(done.response).toMatchObject({ status: "completed", usage: { output_tokens: 5 } });
    s.ws.close();
    await s.closed;
  });

  it("answers a bad event with an error event, and echoes binary messages", async () => {
    const fleet = await fleetOf({ workers: 1 });
    const s = opened(await connect(wsUrl(fleet.urls[0] as string, "?model=kvgate-sim")));
    await s.event("session.created");
    s.ws.send(JSON.stringify({ type: "response.create", event_id: "c2", response: { max_output_tokens: 0 } }));
    const err = await s.event("error");
    expect(err.error).toMatchObject({ type: "invalid_request_error", code: "invalid_value", event_id: "c2" });
    s.ws.send(Buffer.from([1, 2, 3]));
    const echo = await s.next();
    expect([echo.binary, [...echo.data]]).toEqual([true, [1, 2, 3]]);
    s.ws.close();
    await s.closed;
  });

  it("closes with the code and reason a kvgate_sim.close event asks for", async () => {
    const fleet = await fleetOf({ workers: 1 });
    const s = opened(await connect(wsUrl(fleet.urls[0] as string, "?model=kvgate-sim")));
    s.ws.send(JSON.stringify({ type: "kvgate_sim.close", code: 4002, reason: "bye" }));
    expect(await s.closed).toEqual({ code: 4002, reason: "bye" });
  });

  it("refuses another model, or another path, with vLLM's 404, and logs the handshakes it took", async () => {
    const fleet = await fleetOf({ workers: 1, servedModelName: "rt-7b" });
    const url = fleet.urls[0] as string;
    const wrong = await connect(wsUrl(url, "?model=other"));
    expect(wrong.kind === "refused" && [wrong.status, wrong.body.error.param, wrong.headers["x-sim-worker"]]).toEqual([404, "model", "0"]);
    const path = await connect(`${url.replace(/^http/, "ws")}/v1/elsewhere`);
    expect(path.kind === "refused" && [path.status, path.headers["x-sim-worker"]]).toEqual([404, "0"]);
    expect(fleet.requests(0).map((r) => r.path)).toEqual(["/v1/realtime?model=other"]);
  });
});
