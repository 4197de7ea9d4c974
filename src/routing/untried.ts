import type { ResolvedDeployment } from "../config/load.ts";

/**
 * Whether `deployments` hold one a request could still be sent to: taking requests (active), not
 * yet tried by it (`tried`), and reachable as this isolate is configured (`unreachable`: a secret or
 * binding its deploy lacks). Where it says none, the group's refusal is the request's answer.
 */
export function anyUntried(deployments: readonly ResolvedDeployment[], tried: readonly string[], unreachable: readonly string[]): boolean {
  return deployments.some((d) => d.state === "active" && !tried.includes(d.id) && !unreachable.includes(d.id));
}
