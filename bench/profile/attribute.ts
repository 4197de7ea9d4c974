/**
 * Where a V8 CPU profile of the gateway's isolate spent its samples: per area (the gateway
 * Worker's code, the routing object's, each library, the runtime's own work) and per function,
 * each function named by its place in kvgate's sources through the bundle's source map (the
 * bundle is minified: its own names are one or two letters).
 *
 * A sample stands for the time until the next one (as DevTools counts it: the sampler's interval
 * stretches when the thread is busy). Shares are of the time the isolate was busy: idle time (the
 * isolate waiting on I/O) is counted apart, since how much there is says more of the load
 * generator than of kvgate. Busy time over the requests served is what a request cost the
 * isolate's thread, which is how two profiles compare.
 */
import { SourceMap } from "node:module";

/** The parts of a .cpuprofile (Profiler.stop's answer) this reads. */
export interface CpuProfile {
  nodes: { id: number; callFrame: CallFrame; children?: number[] }[];
  samples: number[];
  /** µs from the previous sample (the first: from startTime). */
  timeDeltas: number[];
  startTime: number;
  endTime: number;
}

interface CallFrame {
  functionName: string;
  url: string;
  /** 0-based, -1 for the runtime's own frames. */
  lineNumber: number;
  columnNumber: number;
}

export interface AreaShare {
  area: string;
  /** Of the busy time, that whose innermost frame is in this area. */
  self_share: number;
}

export interface FunctionShare {
  /** `name path:line` of the source, or the runtime's name of a native frame. */
  frame: string;
  area: string;
  self_share: number;
  /** Of the busy time, that with this function anywhere on the stack (counted once per sample). */
  total_share: number;
}

export interface ProfileSummary {
  samples: number;
  /** Time the isolate's thread was doing something, in ms. */
  busy_ms: number;
  /** Of all the time, that in which the isolate was idle. */
  idle_share: number;
  areas: AreaShare[];
  /** The busiest functions by self share. */
  functions: FunctionShare[];
  /** kvgate's and its libraries' functions by total share: where a request's time goes, stage by stage. */
  stages: FunctionShare[];
}

/** What a frame of the bundled script is, in the sources. */
interface Place {
  frame: string;
  area: string;
}

const IDLE = "(idle)";

/**
 * Frames not of the bundle: V8's own pseudo-frames, workerd's native APIs (no URL) and its
 * nodejs_compat layer's JavaScript (node-internal:…), each an area of its own; any other script
 * (a benchmark's inline Worker) by its own name and line.
 */
function otherPlace(cf: CallFrame): Place {
  if (cf.url !== "" && !cf.url.startsWith("node-internal:")) return { frame: `${cf.functionName || "(anonymous)"} ${cf.url}:${cf.lineNumber + 1}`, area: `script ${cf.url}` };
  if (cf.url.startsWith("node-internal:")) return { frame: `${cf.functionName || "(anonymous)"} [${cf.url}]`, area: `runtime: ${cf.url}` };
  if (cf.functionName === "(garbage collector)") return { frame: cf.functionName, area: "runtime: garbage collector" };
  if (cf.functionName === "(program)") return { frame: cf.functionName, area: "runtime: native, outside any JavaScript frame" };
  return { frame: `${cf.functionName || "(anonymous)"} [native]`, area: "runtime: native APIs called from JavaScript" };
}

/** What the bundler added of its own (helpers the source map points nowhere for). */
const UNMAPPED = "bundler helpers (no source)";

/** node_modules/<package>/… → the package (scoped ones whole); kvgate's own → its folder, two levels (src/routing, workers/gateway). */
export function areaOf(source: string | null): string {
  if (source === null) return UNMAPPED;
  const parts = source.split("/");
  const nm = parts.lastIndexOf("node_modules");
  if (nm >= 0) {
    const pkg = parts[nm + 1] ?? "?";
    return pkg.startsWith("@") ? `${pkg}/${parts[nm + 2] ?? "?"}` : pkg;
  }
  return parts.slice(0, Math.min(2, parts.length - 1)).join("/");
}

/** The bundled script as the profile names it (its url field), and its source map. */
export interface Bundle {
  url: string;
  map: SourceMap;
}

/** `bundle`: null for a script without a map; `root`: the checkout, stripped from the map's source paths. */
export function summarise(profile: CpuProfile, bundle: Bundle | null, root: string, top = 40): ProfileSummary {
  const rel = (source: string): string => {
    const at = source.indexOf(root);
    return (at >= 0 ? source.slice(at + root.length) : source).replace(/^\/+/, "").replace(/^(\.\.\/)+/, "");
  };
  const places = new Map<number, Place>();
  const parent = new Map<number, number>();
  for (const n of profile.nodes) {
    for (const c of n.children ?? []) parent.set(c, n.id);
    const cf = n.callFrame;
    if (!bundle || cf.url !== bundle.url) {
      places.set(n.id, otherPlace(cf));
      continue;
    }
    const e = bundle.map.findEntry(cf.lineNumber, cf.columnNumber);
    const source = "originalSource" in e ? rel(e.originalSource) : null;
    const name = ("name" in e && e.name) || cf.functionName || "(anonymous)";
    const where = source === null ? "(bundle)" : `${source}:${"originalLine" in e ? e.originalLine + 1 : 0}`;
    places.set(n.id, { frame: `${name} ${where}`, area: areaOf(source) });
  }

  // Each sample's weight: the time to the next sample; the last one's, the mean.
  const at: number[] = [];
  let t = profile.startTime;
  for (const d of profile.timeDeltas) at.push((t += d));
  const perNode = new Map<number, number>();
  profile.samples.forEach((id, i) => {
    const next = at[i + 1];
    const w = next === undefined ? (profile.endTime - profile.startTime) / Math.max(1, profile.samples.length) : next - (at[i] as number);
    perNode.set(id, (perNode.get(id) ?? 0) + Math.max(0, w));
  });
  const areaSelf = new Map<string, number>();
  const self = new Map<string, number>();
  const total = new Map<string, number>();
  let idle = 0;
  let busy = 0;
  for (const [id, n] of perNode) {
    const place = places.get(id) as Place;
    if (place.frame === `${IDLE} [native]`) {
      idle += n;
      continue;
    }
    busy += n;
    areaSelf.set(place.area, (areaSelf.get(place.area) ?? 0) + n);
    self.set(place.frame, (self.get(place.frame) ?? 0) + n);
    // A recursive function is on the stack once per sample, however deep.
    const seen = new Set<string>();
    for (let x: number | undefined = id; x !== undefined; x = parent.get(x)) {
      const p = places.get(x) as Place;
      if (seen.has(p.frame)) continue;
      seen.add(p.frame);
      total.set(p.frame, (total.get(p.frame) ?? 0) + n);
    }
  }
  const share = (n: number) => (busy === 0 ? 0 : Math.round((n / busy) * 10_000) / 10_000);
  const areas = [...areaSelf].map(([area, n]) => ({ area, self_share: share(n) })).sort((a, b) => b.self_share - a.self_share);
  const areaOfFrame = new Map([...places.values()].map((p) => [p.frame, p.area]));
  const row = (frame: string): FunctionShare => ({ frame, area: areaOfFrame.get(frame) as string, self_share: share(self.get(frame) ?? 0), total_share: share(total.get(frame) ?? 0) });
  const functions = [...self.keys()].map(row).sort((a, b) => b.self_share - a.self_share).slice(0, top);
  const stages = [...total.keys()]
    .map(row)
    .filter((f) => !f.area.startsWith("runtime"))
    .sort((a, b) => b.total_share - a.total_share)
    .slice(0, top);
  const all = idle + busy;
  return { samples: profile.samples.length, busy_ms: Math.round(busy) / 1000, idle_share: all === 0 ? 0 : Math.round((idle / all) * 10_000) / 10_000, areas, functions, stages };
}
