/** `value` after `elapsed` (in the clock `halfLife` is counted in) of halving every `halfLife`. */
export function decayed(value: number, elapsed: number, halfLife: number): number {
  return value * 2 ** (-elapsed / halfLife);
}
