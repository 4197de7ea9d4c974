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
  } catch {
    return { ok: false, error: whereNotJson(plain) };
  }
}

/**
 * What is wrong with text JSON.parse refused, and where, quoting none of it: V8's message quotes
 * the text around the error (all of a short config), and the Worker answers a config's error to
 * anyone who calls it — a key pasted where a secret's name goes would be in that answer.
 */
function whereNotJson(text: string): string {
  let at: number;
  try {
    at = firstInvalid(text);
  } catch {
    return "it is nested too deep to read"; // The scanner's own stack, past any config's depth.
  }
  // JSON.parse's refusal of text read as JSON here: no place to name.
  if (at < 0) return "it is not JSON";
  let line = 1;
  let lineStart = 0;
  for (let k = 0; k < at; k++) if (text[k] === "\n") (line++, (lineStart = k + 1));
  const where = `at line ${line} column ${at - lineStart + 1}`;
  if (at >= text.length) return `Unexpected end of JSON input ${where}`;
  const c = text.charCodeAt(at);
  return c < 0x20 ? `Bad control character ${where}` : `Unexpected token '${text[at]}' ${where}`;
}

/** Where `text` stops being JSON (its length when it ends too soon); -1 where it is JSON. */
function firstInvalid(text: string): number {
  let i = 0;
  const space = () => {
    while (text[i] === " " || text[i] === "\t" || text[i] === "\n" || text[i] === "\r") i++;
  };
  /** Past the token that closes what is open (`close` at i), or false. */
  const closes = (close: string): boolean => {
    if (text[i] !== close) return false;
    i++;
    return true;
  };
  const string = (): boolean => {
    i++;
    while (i < text.length) {
      const c = text[i] as string;
      if (c === "\\") {
        const e = text[i + 1];
        const ok = e === "u" ? /^[0-9a-fA-F]{4}$/.test(text.slice(i + 2, i + 6)) : e !== undefined && '"\\/bfnrt'.includes(e);
        if (!ok) {
          i++;
          return false;
        }
        i += e === "u" ? 6 : 2;
      } else if (c.charCodeAt(0) < 0x20) {
        return false;
      } else {
        i++;
        if (c === '"') return true;
      }
    }
    return false;
  };
  const NUMBER = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y;
  const value = (): boolean => {
    space();
    const c = text[i];
    if (c === "{" || c === "[") {
      const close = c === "{" ? "}" : "]";
      i++;
      space();
      if (closes(close)) return true;
      for (;;) {
        if (c === "{") {
          space();
          if (text[i] !== '"' || !string()) return false;
          space();
          if (!closes(":")) return false;
        }
        if (!value()) return false;
        space();
        if (!closes(",")) return closes(close);
      }
    }
    if (c === '"') return string();
    for (const word of ["true", "false", "null"]) {
      if (text.startsWith(word, i)) {
        i += word.length;
        return true;
      }
    }
    NUMBER.lastIndex = i;
    if (!NUMBER.test(text)) return false;
    i = NUMBER.lastIndex;
    return true;
  };
  if (!value()) return i;
  space();
  return i < text.length ? i : -1;
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
