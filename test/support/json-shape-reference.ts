import type { ShapeBounds, ShapeExcess } from "../../src/openai/body-shape.ts";

/**
 * The body-shape rules of src/openai/body-shape.ts, written the plain way — one character at a
 * time, a flag for "inside a string" and one for "after a backslash" — as the oracle the tests
 * hold the gateway's faster scan to, on JSON and on text that is not JSON alike.
 */
export function referenceShapeExcess(text: string, bounds: ShapeBounds): ShapeExcess | null {
  let inString = false;
  let escaped = false;
  let depth = 0;
  let nodes = 0;
  const keys: number[] = [];
  let stringStart = -1;
  let lastString = "";
  let field: string | null = null;
  const excess = (rule: ShapeExcess["rule"], at: number): ShapeExcess => ({ rule, field: at >= 2 ? field : null });
  for (let i = 0; i < text.length; i++) {
    const ch = text[i];
    if (inString) {
      if (escaped) escaped = false;
      else if (ch === "\\") escaped = true;
      else if (ch === '"') {
        inString = false;
        if (stringStart >= 0) lastString = text.slice(stringStart, i + 1);
      }
      continue;
    }
    if (ch === '"') {
      inString = true;
      stringStart = depth === 1 ? i : -1;
    } else if (ch === "{" || ch === "[") {
      depth++;
      if (depth > bounds.maxDepth) return excess("depth", depth);
      nodes++;
      if (nodes > bounds.maxNodes) return excess("nodes", depth);
      keys[depth] = 0;
    } else if (ch === "}" || ch === "]") {
      if (depth > 0) depth--;
    } else if (ch === ":") {
      if (depth === 1) field = decode(lastString);
      nodes++;
      if (nodes > bounds.maxNodes) return excess("nodes", depth);
      if (depth > 0) {
        keys[depth] = (keys[depth] ?? 0) + 1;
        if ((keys[depth] ?? 0) > bounds.maxObjectKeys) return excess("object-keys", depth);
      }
    }
  }
  return null;
}

function decode(jsonString: string): string | null {
  try {
    const v: unknown = JSON.parse(jsonString);
    return typeof v === "string" ? v : null;
  } catch {
    return null;
  }
}
