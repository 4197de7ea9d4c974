/**
 * What a block of a shared prefix copied onto a full cache costs later, in prefills, beside its own
 * prefill now: the block it evicts, prefilled again by whoever reuses it. Chosen in virtual time
 * from 1, 2, 3 and 6 (bench:routing-virtual, every trace): 3 gains pressured RAG most of the
 * kv_hit 6 gives.
 */
const COPY_EVICTS = 3;

/**
 * What copying `blocks` of a shared prefix onto a cache `fill` full (0–1) costs beyond their
 * prefill, in blocks: the prefix stays cached where it was for its other users, and each block
 * copied evicts one there. prefix-aware prices a move between one object's backends by it, and a
 * shard passing a prompt on to the next shard (GroupRouter.route's spill) by the same.
 */
export function copyCost(fill: number, blocks: number): number {
  return COPY_EVICTS * fill * blocks;
}
