/** overhead.md: the checks, the ratios, every median figure, and how they were taken. */
import { ttftAdded, type Check } from "./checks.ts";
import type { Report } from "./report.ts";
import { keyOf, type Figures, type Summary } from "./summary.ts";
import { round } from "../stats/round.ts";

type Row = (string | number | null)[];

function table(head: string[], rows: Row[]): string {
  const cell = (x: string | number | null): string => (x === null ? "–" : String(x));
  return [`| ${head.join(" | ")} |`, `| ${head.map(() => "---").join(" | ")} |`, ...rows.map((r) => `| ${r.map(cell).join(" | ")} |`)].join("\n");
}

const verdict = (c: Check): string => (c.met === null ? "not measured" : c.met ? "met" : "**missed**");

function figures(medians: Figures[]): string {
  return table(
    ["target", "mode", "c", "chunks", "req/s", "p50 ms", "p95 ms", "p99 ms", "TTFT p50", "TTFT p95", "errors", "DO calls/req"],
    medians.map((m) => [m.label, m.mode, m.concurrency, m.chunks, ...[m.rps, m.latency.p50, m.latency.p95, m.latency.p99, m.ttft.p50, m.ttft.p95].map(round), m.errors, round(m.doCallsPerRequest)]),
  );
}

function overheadHeader(medians: Figures[]): string {
  const rows = medians.filter((m) => m.overheadHeader).map((m): Row => [keyOf(m.label, m), round(m.overheadHeader?.p50 ?? null), round(m.overheadHeader?.p95 ?? null), round(m.overheadHeader?.p99 ?? null)]);
  return table(["kvgate target and scenario", "p50 ms", "p95 ms", "p99 ms"], rows);
}

function cpuTable(s: Summary): string {
  const rows = s.medians
    .filter((m) => m.mode === "nonstream" && m.concurrency === 50 && s.cpuTotals.has(keyOf(m.label, m)))
    .map((m): Row => {
      const k = keyOf(m.label, m);
      const split = s.cpuSplits.get(k);
      return [m.label, round(s.cpuTotals.get(k) ?? null), round(split?.worker ?? null), round(split?.object ?? null)];
    });
  return table(["target", "workerd CPU µs/req", "Worker µs", "object µs"], rows);
}

export function renderMarkdown(r: Report, s: Summary, checks: Check[], ratios: { what: string; value: number | null; basis: string }[]): string {
  const m = r.machine;
  const cold = r.coldStart.kvgate;
  const floorCold = r.coldStart.floor;
  const versions = Object.entries(r.versions).map(([k, v]) => `${k} ${v}`).join(", ");
  const errorLines = Object.entries(s.errorsAllRepeats).map(([k, e]) => `- ${k}: ${e.errors} errors over all repeats (${e.samples.join("; ")})`);
  const spread = Object.entries(s.repeatsRps)
    .filter(([, v]) => v.length > 1)
    .map(([k, v]) => `${k}: ${v.join(" / ")}`);
  return `# Overhead benchmark

What a gateway adds to a request: the same zero-latency simulated fleet reached directly, through
the runtime's floor (a Worker that only fetches the upstream and returns its body), through kvgate
(no hooks; the same with request lines off, \`kvgate-nolog\`; the restamp hook; no hooks with a virtual
key, \`kvgate-key\`; no hooks with every answer's usage read for routing, \`kvgate-feedback\`; the
group over two routing objects, \`kvgate-sharded\`; every deployment ordering its queue by the
priority kvgate sets, \`kvgate-priority\`), and through the peer gateways that are installed.

\`\`\`sh
${r.command}
\`\`\`

${r.date} · ${m.cpu}, ${m.cores} cores (shared), ${m.memoryGiB} GiB · Node ${m.node} · ${versions}
· each figure the median over ${r.args.repeats} repeat(s) of ${r.args.seconds} s · run took ${r.elapsedSeconds} s.
Absolute figures are for this machine only; the ratios compare windows of the same run.

![req/s at c=50 relative to the floor](overhead.svg)

## Targets (issue 15)

${table(
  ["what", "goal", "value", "verdict", "from (medians)"],
  checks.map((c) => [c.what, c.goal, c.value, verdict(c), c.basis]),
)}

## Other ratios

${table(
  ["what", "value", "from (medians)"],
  ratios.map((x) => [x.what, x.value, x.basis]),
)}

## CPU per request: the Worker's and its routing object's

workerd's CPU time over the completed requests (non-streamed, c=50; median over repeats). The
\`-apart\` twins serve the Durable Objects in a workerd of their own: that process's CPU is the
object's side. kvgate's and the ceiling's Worker side is their one-process CPU less their twin's
object side, paired by repeat; the twins' own Worker processes also pay the stub hop between the
two processes (Miniflare's dev registry), which production does not have.

${cpuTable(s)}

## TTFT added over the floor (p50, c=1, 20 chunks)

${table(
  ["target", "ms"],
  ttftAdded(s.medians).map((t) => [t.label, t.addedMs]),
)}

## Figures (medians over repeats)

Latency is the whole response (for streams: the full stream); TTFT is the time to the first
event carrying content. DO calls/req = the model group's Durable Object route + release calls
during the window over the requests sent.

${figures(s.medians)}

## x-kvgate-overhead-ms

Gateway time before the upstream request went out (auth, validation, fingerprint, route RPC), as
the responses reported it. workerd's clock only moves across I/O (a Spectre mitigation), so this
header counts I/O waits — the route RPC, the request body — in whole milliseconds, not CPU time.

${overheadHeader(s.medians)}

## Bundle and cold start

- Worker bundle (\`wrangler deploy --dry-run\`, minified): ${(r.bundle.bytes / 1024).toFixed(1)} KiB, **${(r.bundle.gzipBytes / 1024).toFixed(1)} KiB gzipped**.
- Cold start, new Miniflare (bundle built) to the first answered completion: kvgate ${cold ? `**${cold.firstResponseMs.toFixed(0)} ms** (workerd ready after ${cold.readyMs.toFixed(0)} ms)` : "not measured"}; floor ${floorCold ? `${floorCold.firstResponseMs.toFixed(0)} ms (ready after ${floorCold.readyMs.toFixed(0)} ms)` : "not measured"}. Locally this includes starting workerd; on Cloudflare only the isolate's part applies.

## Peers

Installed into git-ignored folders at pinned versions by

\`\`\`sh
npx node bench/peers/install.ts            # both; or: npx node bench/peers/install.ts portkey | litellm
\`\`\`

- Portkey (\`@portkey-ai/gateway\`, bench/.peers/) with \`@hono/node-server\` held at 1.13.5 by an npm
  \`overrides\` entry (streams fail with newer adapters, its issue #1389). Its server has no host
  option; a preloaded module-resolve hook (bench/peers/portkey-loopback.ts) hands its \`serve()\` a
  \`hostname: "127.0.0.1"\`, and the benchmark checks /proc/net before using it. Routed with
  \`x-portkey-provider: openai\` and \`x-portkey-custom-host\`.
- LiteLLM (\`litellm[proxy]\`, bench/.venv/) on 127.0.0.1 with a random master key from an env var
  its config references, \`LITELLM_LOCAL_MODEL_COST_MAP=True\`, \`LITELLM_TELEMETRY=False\`; run with 1
  worker and with one per core (\`--num_workers\`, recorded as \`workers\` in its runs).
- A peer that is not installed is skipped with a note below, never estimated.

## Method

- Upstream: the fleet simulator, preset \`instant\` (no prefill or decode time), ${r.fleet.workers} workers in a child
  process of their own. kvgate's model group has every worker as a deployment (prefix-aware
  routing does its real work); direct, floor and peers are sent to the first worker.
- Workers are served by Miniflare's API on a direct socket (one workerd; no \`wrangler dev\` proxy, and not
  through Miniflare's entry Worker, a dev-tool hop that costs about as much as the floor itself), bundled as
  \`wrangler deploy\` bundles them. The floor and the kvgate targets run side by side and are
  measured in turns (order reversed every other repeat), Portkey (one process) in the same turns;
  LiteLLM's workers, a fleet of processes, run alone after.
- Load: 16 chat requests sharing a system prompt, sent in turn. Non-streaming: autocannon,
  closed loop, \`max_tokens\` 16. Streaming: a raw-socket keep-alive client (bench/overhead/stream-load.ts)
  that times the first content event and the end of the stream; chunks = \`max_tokens\`, one
  SSE event per token, with \`stream_options.include_usage\`.
- kvgate-restamp asks for model \`bookshop-assistant\`, served upstream as \`kvgate-sim\`, so every
  chunk is rewritten. kvgate and kvgate-restamp check a Bearer master key on every request, as
  kvgate always does.
- kvgate writes one JSON request line per request (the default, \`logging.requests.sampleRate\` 1);
  kvgate-nolog is the same config with sampleRate 0: kvgate / kvgate-nolog is what logging costs.
- kvgate-feedback is kvgate with \`feedback.sampleRate\` 1: every answer's usage is read and taught
  to routing (a stream's from a tapped copy of its body, the stream itself on the native pipe, since
  its client asks for the usage event: src/stream/usage-tap.ts); kvgate-feedback / kvgate is what one
  sampled request costs, and a rate r costs r times that on average.
- kvgate-sharded is kvgate with the group over 2 routing objects (\`shards\` 2), one fleet worker
  each: the Worker keys every prompt and picks its shard (src/sharding/); kvgate-sharded / kvgate
  is what that costs.
- kvgate-priority is kvgate with every deployment's \`schedulingPolicy\` \`priority\`: the routing
  object puts each request's priority in its answer and the Worker sets it in the upstream body
  (src/routing/engine-priority.ts); kvgate-priority / kvgate is what that costs. The fleet's
  workers take it (\`--scheduling-policy priority\`); an instant worker queues nothing to order.
- kvgate-key is kvgate's gateway and config with an admin key; the client sends a virtual key made
  through \`POST /admin/v1/keys\` with rpm 10⁸, tpm 10¹⁰, max_parallel 10⁵, a budget of 10¹⁵ tokens a
  month and usage tracking on (bench/overhead/key-target.ts): far above the load, so nothing is
  refused, but every limit is checked, and every answer's usage is read and sent with the lease's
  release. After its warm-up the run stops unless \`GET /admin/v1/usage?key=ID\` shows recorded
  requests. Its streams ask for \`stream_options.include_usage\` themselves, so the usage event is
  passed on, not stripped, and the stream keeps the native pipe: its usage is read from a tapped
  copy of the body (src/stream/usage-tap.ts, since e580970; before it, the JavaScript relay).
- ceiling is the least a prefix-routing gateway does on this runtime: the floor plus reading and
  re-serialising the body and one RPC to a toy router (bench/harness/ceiling-worker.ts), as
  bench:ceiling's floor+body+route.
- Each figure is the median over the repeats of that figure: req/s, each latency and TTFT
  percentile, DO calls and errors apart, so a TTFT target compares median TTFTs, not one repeat's
  (overhead.json's \`figures_per_repeat\` has each repeat's). Warm-up traffic first, per target.
- The load generator, the fleet, workerd and the peers share the machine's cores: every target
  pays the client's and the fleet's CPU, which narrows the ratios of gateway-bound targets.

## Notes

${[...r.notes.map((n) => `- ${n}`), ...errorLines, ...(errorLines.length === 0 ? ["- No errors in any repeat."] : [])].join("\n")}
${spread.length > 0 ? `\nreq/s of each repeat:\n\n${spread.map((x) => `- ${x}`).join("\n")}\n` : ""}`;
}
