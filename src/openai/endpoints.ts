/** The OpenAI-style endpoints the gateway routes, by what they are (their paths: workers/gateway/endpoints.ts). */
export type Endpoint = "chat" | "completions" | "responses" | "embeddings" | "rerank" | "score";

/** The endpoints whose answers are generated text (the others' are vectors or scores). */
export function generatesText(endpoint: Endpoint): boolean {
  return endpoint === "chat" || endpoint === "completions" || endpoint === "responses";
}
