/** The OpenAI-style endpoints the gateway routes, by what they are (their paths: workers/gateway/endpoints.ts). */
export type Endpoint = "chat" | "completions" | "responses" | "embeddings" | "rerank" | "score";
