/**
 * `fn` over `items` with at most `n` calls under way, the answers in the order of `items`. For a
 * read of the whole fleet that asks each group's routing objects: all at once, a fleet of a
 * thousand groups would be a thousand calls out of one request together.
 */
export async function atMost<T, R>(n: number, items: readonly T[], fn: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array<R>(items.length);
  let next = 0;
  const lane = async (): Promise<void> => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i] as T);
    }
  };
  await Promise.all(Array.from({ length: Math.min(n, items.length) }, lane));
  return out;
}
