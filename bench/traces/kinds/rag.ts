import { kbToBytes, type TraceParams } from "../options.ts";
import { shuffled, streamFor, zipfSampler, type Rng } from "../prng.ts";
import { documentText, systemPrompt } from "../prompts.ts";
import type { Session, Turn } from "../types.ts";
import { question } from "../words.ts";

/**
 * Retrieval-augmented questions: each request is the shared system prompt, then one user message
 * with 1–3 documents from a pool and a question. Documents are drawn by Zipf-like popularity and
 * rendered in pool order, as a retriever that sorts by id would, so the same set renders the same
 * bytes and requests that share a leading document share a prefix. Independent requests.
 */
export const RAG_KEYS = [
  "ragSystemKB",
  "ragDocs",
  "ragDocMinKB",
  "ragDocMaxKB",
  "ragDocsPerRequestMin",
  "ragDocsPerRequestMax",
  "ragZipfExponent",
  "userMinChars",
  "userMaxChars",
] as const;

const PREAMBLE = "Answer the question using only the documents below. Cite documents by their label.\n\n";

export function ragSessions(p: TraceParams): Session[] {
  const system = systemPrompt(streamFor(p.seed, "system"), kbToBytes(p.ragSystemKB));
  const docs: string[] = [];
  for (let d = 0; d < p.ragDocs; d++) {
    const rng = streamFor(p.seed, "doc", d);
    docs.push(documentText(rng, rng.int(kbToBytes(p.ragDocMinKB), kbToBytes(p.ragDocMaxKB)), `doc ${d}`));
  }
  // Popularity rank is not pool order: the most popular document is not always rendered first.
  const docOfRank = shuffled(streamFor(p.seed, "popularity"), p.ragDocs);
  const rank = zipfSampler(p.ragDocs, p.ragZipfExponent);

  const sessions: Session[] = [];
  for (let s = 0; s < p.sessions; s++) {
    const rng = streamFor(p.seed, "session", s);
    const turns: Turn[] = [];
    for (let t = 0; t < p.turns; t++) {
      const count = rng.int(p.ragDocsPerRequestMin, p.ragDocsPerRequestMax);
      const chosen = drawDistinct(rng, count, p.ragDocs, () => docOfRank[rank(rng)] ?? 0);
      const body = chosen.map((d) => docs[d]).join("\n\n");
      const ask = question(rng, rng.int(p.userMinChars, p.userMaxChars));
      turns.push({
        add: [
          { role: "system", content: system },
          { role: "user", content: `${PREAMBLE}${body}\n\nQuestion: ${ask}` },
        ],
        withHistory: false,
        appendReply: false,
        maxTokens: p.maxTokens,
      });
    }
    sessions.push({ id: `rag-${s}`, turns });
  }
  return sessions;
}

/** `count` distinct documents in ascending (canonical) order; a steep Zipf tail falls back to uniform draws. */
function drawDistinct(rng: Rng, count: number, pool: number, draw: () => number): number[] {
  const chosen = new Set<number>();
  for (let tries = 0; chosen.size < count && tries < count * 32; tries++) chosen.add(draw());
  while (chosen.size < count) chosen.add(rng.int(0, pool - 1));
  return [...chosen].sort((a, b) => a - b);
}
