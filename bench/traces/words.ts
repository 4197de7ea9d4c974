import type { Rng } from "./prng.ts";

/**
 * Realistic-looking text from seeded word lists: sentences of common and technical English words,
 * so prompts have the byte statistics of prose (a prefix cache or a hash sees no artificial
 * repetition), generated fast enough that a large trace costs milliseconds.
 */

const FUNCTION_WORDS = (
  "the a an of to in for on with by from at as and or but if that this these those it its is are was were be " +
  "been has have had can could should would will may might must not no all each every some any more most such " +
  "than then when where which who while about after before between into over under through during without"
).split(" ");

const CONTENT_WORDS = (
  "system request response server client cache memory token model prompt batch queue worker latency throughput " +
  "window context document section report table value record field index query result error status update " +
  "change version release feature option setting config file folder path name user team project customer order " +
  "invoice payment account balance policy contract clause term period date month year week hour minute second " +
  "price cost budget revenue growth market product service support ticket issue problem solution approach method " +
  "process step stage phase plan goal target metric measure signal trend pattern sample dataset feature label " +
  "network router gateway region zone cluster node replica shard partition storage volume disk bucket object " +
  "function class module package library framework interface schema type argument parameter return callback " +
  "event handler listener stream buffer chunk block segment frame packet header body payload message channel " +
  "review summary analysis detail example reference note comment question answer explanation description draft " +
  "small large fast slow simple complex stable recent previous current next final initial default internal external " +
  "public private secure reliable available consistent critical minor major optional required expected actual " +
  "build run test deploy check verify validate measure compare explain describe summarize list create remove " +
  "read write send receive store load parse format convert merge split sort filter group count select " +
  "increase reduce improve handle manage monitor track report schedule assign review approve reject retry " +
  "customers engineers analysts operators developers managers teams vendors partners regions markets servers " +
  "requests responses tokens documents records errors results updates changes features options settings files " +
  "quickly carefully usually often rarely only also still already again however therefore instead otherwise"
).split(" ");

const ALL_WORDS = [...FUNCTION_WORDS, ...FUNCTION_WORDS, ...CONTENT_WORDS];

function word(rng: Rng): string {
  return rng.pick(ALL_WORDS);
}

function sentence(rng: Rng, end: string): string {
  const count = rng.int(6, 18);
  const words: string[] = [rng.pick(CONTENT_WORDS)];
  for (let i = 1; i < count; i++) words.push(word(rng));
  const first = words[0] ?? "";
  words[0] = first.charAt(0).toUpperCase() + first.slice(1);
  if (count > 9 && rng.chance(0.4)) words[rng.int(3, count - 3)] += ",";
  return words.join(" ") + end;
}

/** Cuts at a word boundary so the text is at most `bytes` long and ends as a sentence does. */
function fit(text: string, bytes: number, end: string): string {
  if (text.length <= bytes) return text;
  const cut = text.lastIndexOf(" ", bytes - end.length);
  return text.slice(0, cut > 0 ? cut : bytes - end.length).replace(/[,.?]$/, "") + end;
}

/** Paragraphs of prose, `bytes` long or a few bytes shorter (ASCII: bytes = characters). */
export function prose(rng: Rng, bytes: number): string {
  const parts: string[] = [];
  let length = 0;
  let inParagraph = 0;
  while (length < bytes) {
    const s = sentence(rng, ".");
    const sep = parts.length === 0 ? "" : inParagraph >= rng.int(3, 6) ? "\n\n" : " ";
    if (sep === "\n\n") inParagraph = 0;
    parts.push(sep, s);
    length += sep.length + s.length;
    inParagraph++;
  }
  return fit(parts.join(""), bytes, ".");
}

/** A question of about `chars` characters, with sentences of context before it when there is room. */
export function question(rng: Rng, chars: number): string {
  const q = sentence(rng, "?");
  if (q.length >= chars) return fit(q, chars, "?");
  const room = chars - q.length - 1;
  return room < 20 ? q : `${prose(rng, room)} ${q}`;
}

export function title(rng: Rng): string {
  const count = rng.int(2, 5);
  const words: string[] = [];
  for (let i = 0; i < count; i++) {
    const w = rng.pick(CONTENT_WORDS);
    words.push(w.charAt(0).toUpperCase() + w.slice(1));
  }
  return words.join(" ");
}

/** A snake_case name of two or three words, for tools and fields. */
export function identifier(rng: Rng, parts = rng.int(2, 3)): string {
  const words: string[] = [];
  for (let i = 0; i < parts; i++) words.push(rng.pick(CONTENT_WORDS));
  return words.join("_");
}

export function phrase(rng: Rng, min: number, max: number): string {
  const count = rng.int(min, max);
  const words: string[] = [];
  for (let i = 0; i < count; i++) words.push(word(rng));
  return words.join(" ");
}
