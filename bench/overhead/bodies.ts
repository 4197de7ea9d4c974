/**
 * The request bodies every target gets: 16 chat requests sharing a system prompt (as an app's
 * traffic does), each with its own question, so the gateway fingerprints, matches and learns
 * real prefixes. The same bytes go to every target except for the `model` name.
 */

const SYSTEM =
  "You are a concise assistant for an online bookshop. Answer in plain English, cite the catalogue " +
  "section when you can, never invent prices, and ask one clarifying question when a request is " +
  "ambiguous. Keep answers under five sentences.";

const QUESTIONS = [
  "Which novels by Ursula K. Le Guin do you stock?",
  "Do you ship to Norway, and how long does it take?",
  "What is a good first book on distributed systems?",
  "Can I return a book I bought as a gift?",
  "Recommend three short story collections for a long train ride.",
  "Is the second edition of Designing Data-Intensive Applications out?",
  "What are your opening hours on public holidays?",
  "Do you sell audiobooks or only print and e-books?",
  "Which poetry anthologies are suitable for teenagers?",
  "How do I use a gift card online?",
  "What science fiction came out this month?",
  "Can you hold a book for me until Saturday?",
  "Do you have large-print editions of classic mysteries?",
  "Which cookbooks focus on vegetarian Indian food?",
  "What is the difference between a hardback and a library binding?",
  "Are signed copies more expensive?",
];

export interface BodyOptions {
  model: string;
  stream: boolean;
  maxTokens: number;
  /** Streams ask for `stream_options.include_usage` (true unless false is given). */
  includeUsage?: boolean;
}

export function chatBodies(o: BodyOptions): string[] {
  return QUESTIONS.map((q) =>
    JSON.stringify({
      model: o.model,
      messages: [
        { role: "system", content: SYSTEM },
        { role: "user", content: q },
      ],
      max_tokens: o.maxTokens,
      // The gateway reads the final usage event at stream end, as it would in production.
      ...(o.stream ? { stream: true, ...(o.includeUsage === false ? {} : { stream_options: { include_usage: true } }) } : {}),
    }),
  );
}
