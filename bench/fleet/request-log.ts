import type { IncomingHttpHeaders } from "node:http";

export interface LoggedRequest {
  /** Date.now() when the worker had read the request, for a benchmark's timeline. */
  at: number;
  path: string;
  headers: IncomingHttpHeaders;
  /** The body as parsed JSON; null when it was empty or not JSON. */
  body: unknown;
}

/**
 * The last requests a worker received, oldest first, for GET /sim/requests: tests read it to see
 * what a gateway actually sent upstream (rewritten model name, pass-through fields, headers).
 */
export class RequestLog {
  private readonly entries: (LoggedRequest | undefined)[];
  private next = 0;
  private count = 0;

  constructor(size: number) {
    this.entries = new Array<LoggedRequest | undefined>(size);
  }

  record(entry: LoggedRequest): void {
    if (this.entries.length === 0) return;
    this.entries[this.next] = entry;
    this.next = (this.next + 1) % this.entries.length;
    this.count = Math.min(this.count + 1, this.entries.length);
  }

  list(): LoggedRequest[] {
    const out: LoggedRequest[] = [];
    const size = this.entries.length;
    for (let i = 0; i < this.count; i++) {
      const entry = this.entries[(this.next - this.count + i + size) % size];
      if (entry) out.push(entry);
    }
    return out;
  }

  clear(): void {
    this.entries.fill(undefined);
    this.next = 0;
    this.count = 0;
  }
}
