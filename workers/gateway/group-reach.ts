import type { ResolvedDeployment, ResolvedGroup } from "../../src/config/load.ts";
import { reachOf, type GatewayKeys, type ReachProblem } from "../../src/config/upstream-access.ts";
import type { RequestLog } from "../../src/logging/request-log.ts";
import { GatewayError } from "../../src/openai/errors.ts";
import { backendAsSeen } from "../../src/upstream/answer.ts";
import type { Env, WaitUntil } from "../env.ts";
import { holdLease, type Routed } from "./route-client.ts";

/**
 * A deployment this isolate cannot reach as it says (a binding or secret this deploy lacks, a
 * gateway key it names) is no backend of its group here: nothing can be sent to it, and it is no
 * worse a server for that (another Worker version routing with the same object may hold the
 * secret). Routing passes it over from the start (RouteCall.unreachable), so a request spends no
 * attempt on it, and the failures it meets are judged among the backends that can serve it: a
 * proxy's refusal on the one backend it can reach is the request's (held-failure.ts), not that
 * backend's own. Its 500 config_invalid is the answer only when no backend was left at all.
 */

/** What of a group this isolate can reach, found once per version of the group (its object), never per request. */
export interface GroupReach {
  /** Its active deployments this isolate cannot reach: passed over by routing. */
  readonly unreachable: readonly string[];
  /** How many of its active deployments it can reach: with one, a proxy's refusal there is the request's (HeldFailure.attempting). */
  readonly reachable: number;
  /** What deployment `id` lacks; undefined when it can be reached. */
  lacks(id: string): { deployment: ResolvedDeployment; problems: readonly ReachProblem[] } | undefined;
}

/**
 * Each group's reach, for the version of it last seen (by name): every read of the fleet brings new
 * group objects, the same version included, and the walk (and its log lines) is the version's.
 */
const found = new Map<string, { version: string; reach: GroupReach }>();

/**
 * `group`'s reach in this isolate (`env` and `keys` are the isolate's, the same for every call):
 * one walk over its deployments when this isolate first routes into this version of it (each
 * deployment's reach is resolved once anyway: src/config/upstream-access.ts reachOf), a Map read
 * after. Each active deployment it cannot reach is named in the Worker's log then, with what it lacks.
 */
export function groupReach(group: ResolvedGroup, env: Env, keys: GatewayKeys): GroupReach {
  const known = found.get(group.name);
  if (known?.version === group.version) return known.reach;
  const reach = walk(group, env, keys);
  found.set(group.name, { version: group.version, reach });
  return reach;
}

function walk(group: ResolvedGroup, env: Env, keys: GatewayKeys): GroupReach {
  const lacking = new Map<string, { deployment: ResolvedDeployment; problems: readonly ReachProblem[] }>();
  const unreachable: string[] = [];
  let reachable = 0;
  for (const d of group.deployments) {
    const reach = reachOf(d, env, keys);
    if (!reach.ok) {
      lacking.set(d.id, { deployment: d, problems: reach.problems });
      if (d.state !== "active") continue;
      unreachable.push(d.id);
      console.error(`kvgate: ${unreachableLine(d, group, reach.problems)}; routing passes it over`);
    } else if (d.state === "active") reachable++;
  }
  return { unreachable, reachable, lacks: (id) => lacking.get(id) };
}

/** What a deployment lacks, as the Worker's log and the master key's error say it: its bindings and secrets, the owner's to see. */
function lacksText(problems: readonly ReachProblem[]): string {
  return problems.map((x) => `${x.field} ${x.message}`).join("; ");
}

function unreachableLine(deployment: { id: string }, group: { name: string }, problems: readonly ReachProblem[]): string {
  return `backend ${deployment.id} of group ${group.name} cannot be reached as configured: ${lacksText(problems)}`;
}

/**
 * The error for a request no backend was left to serve but one this isolate cannot reach. What is
 * wrong names the deployment's bindings and secrets, the owner's to see (`owner`: the master key's
 * request); a virtual key's request is told the backend is misconfigured. The operator's log says
 * how, whoever asked.
 */
export function misconfigured(deployment: { id: string }, group: { name: string }, owner: boolean, problems: readonly ReachProblem[]): GatewayError {
  console.error(`kvgate: ${unreachableLine(deployment, group, problems)}`);
  if (owner) return new GatewayError(500, "server_error", `gateway misconfigured: ${backendAsSeen(deployment, group, true)}: ${lacksText(problems)}`, "config_invalid");
  return new GatewayError(500, "server_error", `gateway misconfigured: ${backendAsSeen(deployment, group, false)} cannot be reached as configured (the gateway's log says why)`, "config_invalid");
}

/**
 * What one request (or realtime handshake) met of deployments its isolate cannot reach, in the
 * groups it went through: each is listed on the request's line among its failures (cause
 * `unreachable`), once for each group it entered, though no attempt went to it — the operator's
 * trace, beside kvgate_attempt_failures_total{cause="unreachable"} the routing object counts.
 */
export class PassedOver {
  private readonly env: Env;
  private readonly keys: GatewayKeys;
  private readonly log: RequestLog | null;
  /** The caller owns the deployment (the master key): the answer names what the deployment lacks. */
  private readonly owner: boolean;
  /** The first deployment met that this isolate cannot reach, for the answer when nothing else was left. */
  private first: { group: ResolvedGroup; deployment: ResolvedDeployment; problems: readonly ReachProblem[] } | null = null;
  private noted: string | undefined;
  /**
   * The routing objects that counted the request's deployments they hold that it cannot reach
   * (RouteCall.unreachableCounted): a shard asked again, or a retry, counts none twice.
   */
  readonly countedBy = new Set<string>();

  constructor(env: Env, keys: GatewayKeys, log: RequestLog | null, owner: boolean) {
    this.env = env;
    this.keys = keys;
    this.log = log;
    this.owner = owner;
  }

  /** `group`'s reach in this isolate. */
  of(group: ResolvedGroup): GroupReach {
    return groupReach(group, this.env, this.keys);
  }

  /** `group`'s reach here; its deployments this isolate cannot reach go on the request's line the first time the request routes into it. */
  entering(group: ResolvedGroup): GroupReach {
    const reach = this.of(group);
    if (reach.unreachable.length === 0 || this.noted === group.name) return reach;
    this.noted = group.name;
    for (const id of reach.unreachable) {
      this.log?.failed(group.name, id, "unreachable");
      const lacks = reach.lacks(id);
      if (!this.first && lacks) this.first = { group, ...lacks };
    }
    return reach;
  }

  /**
   * A decision that named a deployment this isolate cannot reach (an object of a release before
   * RouteCall.unreachable, or a version of the group newer than the one it was told of): its
   * lease goes back with no verdict on the backend and what routing taught it of the prompt taken
   * back (`rejected`, of kind `unreachable`), and the caller routes again without it; no attempt.
   */
  passesOver(decision: Routed, routed: ResolvedGroup, group: ResolvedGroup, ctx: WaitUntil, flushMs: number): boolean {
    const lacks = this.of(group).lacks(decision.backendId);
    if (!lacks) return false;
    holdLease(decision, routed, this.env, ctx, flushMs).settle("rejected", { failure: "unreachable" });
    if (!this.first) this.first = { group, ...lacks };
    return true;
  }

  /** The 500 config_invalid of the first deployment met that this isolate cannot reach, when one was; null otherwise. */
  answer(): GatewayError | null {
    const f = this.first;
    return f && misconfigured(f.deployment, f.group, this.owner, f.problems);
  }
}
