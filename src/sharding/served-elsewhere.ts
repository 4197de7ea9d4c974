/**
 * When a sharded group's backends last served, as one isolate saw them, for the silence rule
 * (src/routing/silence.ts). A shard's routing object sees only its own backends: one alone in its
 * shard never had another beside it that served, so the failures the rule judges were never
 * its own. The Worker sees every shard's answers, and a release the rule judges tells the object
 * when another backend of the group last served (LeaseRelease.othersServedAt). What one isolate
 * saw is part of what was served: the time may be too early, never one at which nothing was.
 * Per group, the latest serving backend, when, and when one other than it last did: two numbers,
 * set at the end of each served attempt.
 */

/** Groups kept: past it, the longest-kept goes (its next judged release then tells nothing). */
const MAX_GROUPS = 256;

interface Latest {
  id: string;
  at: number;
  /** The latest time a backend other than `id` served; −Infinity: none seen. */
  otherAt: number;
}

export class ServedElsewhere {
  private readonly groups = new Map<string, Latest>();

  /** `backendId` of `group` served (an answer, a streamed first token) at `at` (epoch ms). */
  served(group: string, backendId: string, at: number): void {
    const latest = this.groups.get(group);
    if (latest === undefined) {
      if (this.groups.size >= MAX_GROUPS) this.groups.delete(this.groups.keys().next().value as string);
      this.groups.set(group, { id: backendId, at, otherAt: -Infinity });
      return;
    }
    if (latest.id !== backendId) {
      latest.otherAt = latest.at;
      latest.id = backendId;
    }
    latest.at = at;
  }

  /** When a backend of `group` other than `backendId` last served, as this isolate saw (epoch ms); −Infinity: never. */
  otherThan(group: string, backendId: string): number {
    const latest = this.groups.get(group);
    if (latest === undefined) return -Infinity;
    return latest.id === backendId ? latest.otherAt : latest.at;
  }
}
