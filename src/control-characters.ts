/**
 * Control characters (C0, DEL and C1), which no name or address the fleet takes may hold: a
 * group's name, a deployment's id, a baseUrl. An id is the answer's x-kvgate-backend header (the
 * runtime cannot build an answer with a line feed there), and ids and baseUrls are shown in the
 * admin API, logs and `npx kvgate` tables, where an escape sequence would rewrite the operator's
 * terminal; and a sharded group's objects are named with one (src/sharding/partition.ts), so no
 * group name can be another's object.
 */
const CONTROLS = "\\u0000-\\u001f\\u007f-\\u009f";

/** A text holding none. */
export const NO_CONTROL_CHARACTERS = new RegExp(`^[^${CONTROLS}]*$`);

export const CONTROL_CHARACTERS_REFUSED = "must not contain control characters";

const CONTROL_CHARACTER = new RegExp(`[${CONTROLS}]`, "g");

/**
 * A value as a terminal may show it: each control character written out (ESC as \u001b, a line
 * feed as \u000a), so a value the admin API returns (one stored before the rule above, a key's
 * name) can neither move the cursor, recolour the screen nor start a line of its own.
 */
export function printable(text: string): string {
  return text.replace(CONTROL_CHARACTER, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}
