/**
 * Each backend's prefix-set capacity: its kvCapacityBlocks, all scaled down alike when together
 * they exceed the group's budget. The budget bounds the Durable Object's memory whatever the
 * number of backends; scaling by capacity keeps a big GPU's share bigger than a small one's.
 */
export function prefixCapacities(kvCapacityBlocks: readonly number[], budget: number): number[] {
  let total = 0;
  for (const k of kvCapacityBlocks) total += k;
  const scale = total <= budget ? 1 : budget / total;
  return kvCapacityBlocks.map((k) => Math.max(1, Math.floor(k * scale)));
}
