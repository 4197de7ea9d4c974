/**
 * Walks a benchmark's command line: `on` gets each argument and a `value()` that takes the next
 * one as that flag's value (an error if there is none), and returns false for a flag it does not
 * know, which is then an error naming `usage`.
 */
export function walkArgs(argv: readonly string[], usage: string, on: (flag: string, value: () => string) => boolean): void {
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i] as string;
    const value = (): string => {
      const v = argv[++i];
      if (v === undefined) throw new Error(`${flag} needs a value`);
      return v;
    };
    if (!on(flag, value)) throw new Error(`unknown argument ${flag}${usage ? ` (${usage})` : ""}`);
  }
}
