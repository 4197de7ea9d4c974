import { printable } from "../src/control-characters.ts";

/**
 * Rows as aligned columns under a header, for a terminal. Cells are the admin API's values, so
 * their control characters are written out (printable): a value cannot rewrite the screen or a row.
 */
export function table(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const cellsOf = rows.map((r) => r.map(printable));
  const widths = header.map((h, i) => Math.max(h.length, ...cellsOf.map((r) => (r[i] ?? "").length)));
  const line = (cells: readonly string[]) => cells.map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i] ?? 0))).join("  ");
  return [line(header), ...cellsOf.map(line)].join("\n");
}
