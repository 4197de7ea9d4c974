/**
 * A realtime WebSocket handshake as the gateway reads it: whether it is one, and its
 * subprotocols. A browser cannot set Authorization on a WebSocket, so OpenAI's realtime API takes
 * the key as one of the offered subprotocols, `openai-insecure-api-key.<key>`; the others
 * (`realtime`, `openai-beta.realtime-v1`) name the protocol itself. The key is read from there,
 * never sent upstream and never echoed back.
 */

const KEY_PROTOCOL_PREFIX = "openai-insecure-api-key.";

/** Whether a request asks to switch to the WebSocket protocol (its Upgrade header). */
export function isWebSocketUpgrade(headers: Headers): boolean {
  return headers.get("upgrade")?.trim().toLowerCase() === "websocket";
}

/**
 * What a WebSocket handshake lacks for the runtime to switch protocols (RFC 6455 §4.1: a key, and
 * version 13), or null. The runtime answers a 101 for such a request with its own plain-text 400 or
 * 426 instead, and the WebSocketPair's other end hears nothing of it: a session opened upstream
 * for it would stay open, its backend's slot held, behind nobody. So it is refused before routing.
 */
export function handshakeFault(headers: Headers): "no-key" | "version" | null {
  if (!headers.get("sec-websocket-key")?.trim()) return "no-key";
  // A repeated header reads as "13, 13": the runtime refuses that too.
  if (headers.get("sec-websocket-version")?.trim() !== "13") return "version";
  return null;
}

/** The offered subprotocols of a Sec-WebSocket-Protocol header, in order. */
export function offeredProtocols(header: string | null): string[] {
  if (header === null) return [];
  const out: string[] = [];
  for (const part of header.split(",")) {
    const p = part.trim();
    if (p !== "") out.push(p);
  }
  return out;
}

/** The API key offered as a subprotocol, or null when none is. */
export function keyFromProtocols(header: string | null): string | null {
  const found = offeredProtocols(header).find((p) => p.startsWith(KEY_PROTOCOL_PREFIX));
  return found === undefined ? null : found.slice(KEY_PROTOCOL_PREFIX.length);
}

/**
 * On a WebSocket handshake that offers the key as a subprotocol, the Authorization header it
 * stands for; null otherwise (the request then has no key at all).
 */
export function subprotocolAuthorization(headers: Headers): string | null {
  if (!isWebSocketUpgrade(headers)) return null;
  const key = keyFromProtocols(headers.get("sec-websocket-protocol"));
  return key ? `Bearer ${key}` : null;
}

/** The offered subprotocols that are not the key: what the upstream is offered. */
export function protocolsWithoutKey(header: string | null): string[] {
  return offeredProtocols(header).filter((p) => !p.startsWith(KEY_PROTOCOL_PREFIX));
}

/**
 * The subprotocol the gateway answers with: the upstream's choice when the client offered it,
 * else the client's first. A client that offered subprotocols must get one of them back (browsers
 * and ws fail the handshake otherwise), so `offered` must not be empty when the client offered any.
 */
export function chosenProtocol(offered: readonly string[], upstreamChoice: string | null): string | null {
  if (upstreamChoice !== null && offered.includes(upstreamChoice)) return upstreamChoice;
  return offered[0] ?? null;
}
