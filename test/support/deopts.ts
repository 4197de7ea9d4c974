/**
 * V8's deoptimisations of the functions `named` in a --trace-deopt trace (its lines, in any order),
 * as their reasons, less the tiering's own: code after a loop compiled before it ever ran
 * ("Insufficient type feedback …"), and entering optimised code mid-loop ("prepare for on stack
 * replacement"). What is left is optimised code meeting a type it did not expect.
 */
export function typeDeopts(lines: readonly string[], named: readonly string[]): string[] {
  const fn = new RegExp(`<JSFunction (${named.join("|")}) `);
  return lines
    .filter((line) => line.includes("bailout") && fn.test(line))
    .map((line) => /reason: ([^)]*\)?)\)/.exec(line)?.[1] ?? line)
    .filter((reason) => !/^Insufficient type feedback|^prepare for on stack replacement/.test(reason));
}
