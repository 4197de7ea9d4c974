/**
 * The `priority` a request carries to a server that orders its queue by it (a deployment's
 * `schedulingPolicy: "priority"`): the time, in ms since the Unix epoch, at which its prefill would
 * end if it started when it was routed — its arrival plus the blocks it must prefill there at that
 * server's rate. Lower goes first, so within a burst short prompts and cache hits are admitted
 * before a long cold prompt that arrived with them, while a long prompt's place still comes as the
 * clock passes it: nothing waits forever behind a stream of short ones. The value is absolute so
 * that every gateway instance's requests to one server compare on one scale.
 * Pure shortest-first, tried on Mooncake's trace in virtual time, starved long prompts behind its
 * bursts (a worse p99); bench/results/virtual-priority has this rule's figures.
 */
export function enginePriority(routedAt: number, uncachedBlocks: number, blocksPerMs: number): number {
  return Math.round(blocksPerMs > 0 ? routedAt + uncachedBlocks / blocksPerMs : routedAt);
}
