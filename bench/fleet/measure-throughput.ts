import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { connect } from "node:net";
import { fileURLToPath } from "node:url";
import { parseFlags, positiveInt, positiveNumber } from "../harness/argv.ts";
import { runCli } from "../harness/cli.ts";
import { ascending, percentile } from "../stats/quantiles.ts";

/**
 * How many small non-streaming requests per second the fleet serves with preset "instant": the
 * ceiling it puts on a gateway overhead benchmark. The fleet runs in its own process (one JS
 * thread: one core); this process is the client, on loopback, with keep-alive connections.
 * Bounded by --seconds and --max-requests.
 *
 *   node bench/fleet/measure-throughput.ts [--workers 1] [--concurrency 64] [--seconds 5] [--max-requests 500000]
 */

interface Args {
  workers: number;
  concurrency: number;
  seconds: number;
  maxRequests: number;
}

function parseArgs(argv: readonly string[]): Args {
  const v = parseFlags(
    argv,
    {
      workers: { type: "string", default: "1" },
      concurrency: { type: "string", default: "64" },
      seconds: { type: "string", default: "5" },
      "max-requests": { type: "string", default: "500000" },
    },
    "--workers N --concurrency N --seconds S --max-requests N",
  );
  return {
    workers: positiveInt("--workers", v.workers),
    concurrency: positiveInt("--concurrency", v.concurrency),
    seconds: positiveNumber("--seconds", v.seconds),
    maxRequests: positiveInt("--max-requests", v["max-requests"]),
  };
}

async function startFleetProcess(workers: number): Promise<{ child: ChildProcess; urls: string[] }> {
  const cli = fileURLToPath(new URL("./cli.ts", import.meta.url));
  const child = spawn(process.execPath, [cli, "--preset", "instant", "--base-port", "0", "--workers", String(workers)], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const urls: string[] = [];
  await new Promise<void>((resolve, reject) => {
    let text = "";
    child.once("exit", (code) => reject(new Error(`fleet exited with ${code}`)));
    child.stdout?.on("data", (chunk: Buffer) => {
      text += chunk.toString();
      const lines = text.split("\n").filter((l) => l.startsWith("http://"));
      if (lines.length >= workers) {
        urls.push(...lines.slice(0, workers));
        resolve();
      }
    });
  });
  return { child, urls };
}

/** CPU seconds (user + system) a process has used, from /proc; undefined off Linux. */
function cpuSeconds(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    // Fields 14 and 15 of stat (utime, stime), counted after "pid (comm) ", in clock ticks.
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return undefined;
  }
}

const BODIES = Array.from({ length: 64 }, (_, i) =>
  JSON.stringify({ model: "kvgate-sim", messages: [{ role: "user", content: `Question ${i}: what is a KV cache?` }], max_tokens: 16 }),
);

interface Load {
  completed: number;
  failed: number;
  latenciesMs: number[];
}

/**
 * Drives the fleet over raw keep-alive sockets, one request in flight per connection. Node's
 * http client costs several times what the server does per request, so with it the client, not
 * the fleet, would be measured; here a request is pre-encoded bytes and a response is read only
 * as far as its status line and Content-Length.
 */
async function drive(urls: string[], args: Args, seconds: number, maxRequests: number): Promise<Load> {
  const targets = urls.map((u) => new URL(u));
  const load: Load = { completed: 0, failed: 0, latenciesMs: [] };
  const deadline = performance.now() + seconds * 1000;
  let issued = 0;
  const connection = (index: number): Promise<void> =>
    new Promise((resolve) => {
      const target = targets[index % targets.length];
      const requests = BODIES.map((body) =>
        Buffer.from(
          `POST /v1/chat/completions HTTP/1.1\r\nHost: ${target?.host}\r\ncontent-type: application/json\r\n` +
            `content-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
        ),
      );
      const socket = connect({ host: target?.hostname, port: Number(target?.port) });
      socket.setNoDelay(true);
      let buffered: Buffer = Buffer.alloc(0);
      let sentAt = 0;
      const send = (): void => {
        if (performance.now() >= deadline || issued >= maxRequests) {
          socket.end();
          return;
        }
        const n = issued++;
        sentAt = performance.now();
        socket.write(requests[n % requests.length] ?? Buffer.alloc(0));
      };
      socket.on("connect", send);
      socket.on("data", (chunk: Buffer) => {
        buffered = buffered.length === 0 ? chunk : Buffer.concat([buffered, chunk]);
        for (;;) {
          const headerEnd = buffered.indexOf("\r\n\r\n");
          if (headerEnd === -1) return;
          const head = buffered.subarray(0, headerEnd).toString("latin1");
          const length = Number(/content-length: *(\d+)/i.exec(head)?.[1] ?? 0);
          if (buffered.length < headerEnd + 4 + length) return;
          if (head.startsWith("HTTP/1.1 200")) load.completed++;
          else load.failed++;
          load.latenciesMs.push(performance.now() - sentAt);
          buffered = buffered.subarray(headerEnd + 4 + length);
          send();
        }
      });
      socket.on("error", () => {
        load.failed++;
        resolve();
      });
      socket.on("close", () => resolve());
    });
  await Promise.all(Array.from({ length: args.concurrency }, (_, i) => connection(i)));
  return load;
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  const { child, urls } = await startFleetProcess(args.workers);
  try {
    await drive(urls, args, 1, 20_000); // warm-up: JIT, sockets
    const cpuBefore = child.pid === undefined ? undefined : cpuSeconds(child.pid);
    const start = performance.now();
    const load = await drive(urls, args, args.seconds, args.maxRequests);
    const elapsed = (performance.now() - start) / 1000;
    const cpuAfter = child.pid === undefined ? undefined : cpuSeconds(child.pid);
    const sorted = ascending(load.latenciesMs);
    const ms = (p: number): number | null => {
      const x = percentile(sorted, p);
      return x === null ? null : Number(x.toFixed(2));
    };
    const rps = load.completed / elapsed;
    const result = {
      workers: args.workers,
      concurrency: args.concurrency,
      seconds: Number(elapsed.toFixed(2)),
      completed: load.completed,
      failed: load.failed,
      requestsPerSecond: Math.round(rps),
      latencyMs: { p50: ms(50), p99: ms(99) },
      fleetCpuSeconds: cpuBefore === undefined || cpuAfter === undefined ? null : Number((cpuAfter - cpuBefore).toFixed(2)),
      requestsPerFleetCpuSecond:
        cpuBefore === undefined || cpuAfter === undefined || cpuAfter === cpuBefore ? null : Math.round(load.completed / (cpuAfter - cpuBefore)),
    };
    console.log(JSON.stringify(result, null, 2));
  } finally {
    child.kill("SIGTERM");
  }
}

await runCli("measure-throughput", main, "node bench/fleet/measure-throughput.ts");
