/**
 * JSON with comments (`//`, `/* … *\/`) and trailing commas, as a config is written by hand (and
 * as the README's example is). Comments and trailing commas become spaces of the same length, so
 * JSON.parse's error positions still point into the text as written.
 */
export type JsoncResult = { ok: true; value: unknown } | { ok: false; error: string };

export function parseJsonc(text: string): JsoncResult {
  const plain = blankOutComments(withoutBom(text));
  if (typeof plain !== "string") return { ok: false, error: plain.error };
  try {
    return { ok: true, value: JSON.parse(plain) };
  } catch (e) {
    return { ok: false, error: (e as Error).message };
  }
}

/**
 * One leading byte order mark, as Notepad and PowerShell save UTF-8 (readFileSync keeps it), is a
 * space: JSON.parse refuses it, and a space keeps its error positions where they were.
 */
function withoutBom(text: string): string {
  return text.startsWith("\ufeff") ? ` ${text.slice(1)}` : text;
}

function blankOutComments(text: string): string | { error: string } {
  const out = text.split("");
  const blank = (from: number, to: number) => {
    for (let k = from; k < to; k++) if (out[k] !== "\n") out[k] = " ";
  };
  // Where the last comma outside a string was, while only whitespace and comments followed it.
  let comma = -1;
  // The last character outside whitespace and comments: a comma right after `[`, `{` or another comma trails nothing.
  let last = "";
  let i = 0;
  while (i < text.length) {
    const c = text[i] as string;
    if (c === '"') {
      comma = -1;
      last = c;
      i++;
      while (i < text.length && text[i] !== '"') i += text[i] === "\\" ? 2 : 1;
      i++;
    } else if (c === "/" && text[i + 1] === "/") {
      const end = text.indexOf("\n", i);
      const stop = end === -1 ? text.length : end;
      blank(i, stop);
      i = stop;
    } else if (c === "/" && text[i + 1] === "*") {
      const end = text.indexOf("*/", i + 2);
      if (end === -1) return { error: `unterminated /* comment at line ${lineOf(text, i)}` };
      blank(i, end + 2);
      i = end + 2;
    } else {
      const space = c === " " || c === "\t" || c === "\n" || c === "\r";
      if ((c === "}" || c === "]") && comma >= 0) out[comma] = " ";
      if (c === ",") comma = last === "[" || last === "{" || last === "," ? -1 : i;
      else if (!space) comma = -1;
      if (!space) last = c;
      i++;
    }
  }
  return out.join("");
}

function lineOf(text: string, at: number): number {
  let line = 1;
  for (let k = 0; k < at; k++) if (text[k] === "\n") line++;
  return line;
}
